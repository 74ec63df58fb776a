"""SGLang 0.5.22's own call for sparse GQA decode: sgl-kernel 0.4.9's FA3
flash_attn_with_kvcache with the top-k slot ids as a page table of page size 1, as SGLang's
sparse (DSA) backend drives FA3 (DSABackend._forward_fa3, srt/layers/attention/dsa_backend.py)
in the decode form of its FA3 backend (FlashAttentionBackend.forward_decode,
srt/layers/attention/flashattention_backend.py):

    flash_attn_with_kvcache(
        q=q [batch, 32, 128], k_cache=k_cache.view(slots, 1, 8, 128), v_cache=...,
        page_table=sparse_indices, cache_seqlens=valid entries per row,
        cu_seqlens_q=0..batch, max_seqlen_q=1, softmax_scale=1/sqrt(128), causal=True,
        softcap=0.0, return_softmax_lse=True, num_splits=0)

The DSA backend calls FA3 with causal=True; with one query per request that masks nothing
(FA3 aligns the causal mask to the bottom right: the last query sees every key). The engine's
DSA path is MLA (qv, one latent KV head); no SGLang call site runs sparse GQA itself (the
interface record says so), so this is that leaf with GQA operands: 32 query heads on 8 KV
heads, query head h reading KV head h // 4, FA3's own GQA mapping. The LSE comes back as
[32, batch] and is transposed to [batch, 32], as the engine does when it returns an LSE.

adapter.py holds the layout work: the cache views (free), cu_seqlens_q (prepare), the valid
count per row (one small kernel per call) and the LSE transpose.
"""

import math

import torch
from sgl_kernel.flash_attn import flash_attn_with_kvcache

# isort: split
from adapter import lse_rows, query_starts, selected_counts, slot_pages

SCALE = 1.0 / math.sqrt(128)


def prepare(q, k_cache, v_cache, sparse_indices) -> torch.Tensor:
    return query_starts(q.shape[0], q.device)


def run(q, k_cache, v_cache, sparse_indices, prepared: torch.Tensor | None = None):
    cu_seqlens_q = prepared if prepared is not None else query_starts(q.shape[0], q.device)
    out, softmax_lse, *_ = flash_attn_with_kvcache(
        q=q,
        k_cache=slot_pages(k_cache),
        v_cache=slot_pages(v_cache),
        page_table=sparse_indices,
        cache_seqlens=selected_counts(sparse_indices),
        cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=1,
        softmax_scale=SCALE,
        causal=True,
        softcap=0.0,
        return_softmax_lse=True,
        num_splits=0,
    )
    return out, lse_rows(softmax_lse)
