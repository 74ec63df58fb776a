"""SGLang 0.5.22's own call for cached-prefix attention: sgl-kernel 0.4.9's FA3
flash_attn_with_kvcache, called as SGLang's FA3 backend calls it when it prefills a chunk
after a cached prefix.

The engine's call (FlashAttentionBackend.forward_extend, srt/layers/attention/
flashattention_backend.py; FA3 comes from sgl_kernel.flash_attn there):

    flash_attn_with_kvcache(
        q=q.view(-1, 16, 256), k_cache=key_cache, v_cache=value_cache,
        page_table=page_table, cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k_new=cu_seqlens_k, max_seqlen_q=max_seqlen_q, softmax_scale=layer.scaling,
        causal=..., window_size=(-1, -1), softcap=0.0, return_softmax_lse=False, num_splits=0)

with the pool already holding the chunk's K/V (the engine writes them first; k and v are not
passed). causal is False here: the definition's chunk is one image whose tokens see each
other and the whole prefix, which is FA3's unmasked attention over prefix + chunk. num_splits
is the backend's non-deterministic default (0: FA3's own split-KV heuristic). GQA 16/8:
FA3 maps query head h to KV head h // 2, as the definition does.

adapter.py builds the pool and metadata from the definition's dense tensors: the index
tensors and the pool's allocation in prepare (shapes only), the copy of prefix and chunk K/V
into the pool in every call (timed). Output [total_q, 16, 256] is viewed back as
[batch, q_len, 16, 256].
"""

import math

import torch
from sgl_kernel.flash_attn import flash_attn_with_kvcache

# isort: split
from adapter import PagedExtend, packed_queries, plan, write_pool

SCALE = 1.0 / math.sqrt(256)


def prepare(q, prefix_k, prefix_v, k, v) -> PagedExtend:
    return plan(q, prefix_k)


def run(q, prefix_k, prefix_v, k, v, prepared: PagedExtend | None = None) -> torch.Tensor:
    paged = prepared if prepared is not None else plan(q, prefix_k)
    write_pool(paged, prefix_k, prefix_v, k, v)
    out = flash_attn_with_kvcache(
        q=packed_queries(q),
        k_cache=paged.k_pool,
        v_cache=paged.v_pool,
        page_table=paged.page_table,
        cache_seqlens=paged.cache_seqlens,
        cu_seqlens_q=paged.cu_seqlens_q,
        cu_seqlens_k_new=paged.cu_seqlens_k,
        max_seqlen_q=paged.max_seqlen_q,
        softmax_scale=SCALE,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        return_softmax_lse=False,
        num_splits=0,
    )
    return out.view(q.shape)
