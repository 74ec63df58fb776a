"""FlashAttention 4 (flash-attn-4 4.0.0b35, CuTe DSL): cached-prefix attention, GQA 16/8, d 256.

No single FA4 call can read the cached prefix and the chunk's own K/V without first copying
them into one tensor: the dense, varlen (cu_seqlens_k) and paged (page_table) forms all take K/V
as one tensor. So instead of the concatenation (a copy of all prefix K/V on every call) the
attention is computed as a cascade of FA4 calls whose partial results are merged exactly by
their log-sum-exps, as serving engines do for cached prefixes:

  1. the chunk's queries over the cached prefix  -> out_p, lse_p
  2. the chunk's queries over the chunk's own K/V -> out_c, lse_c
       flash_attn_func(q, k, v, softmax_scale=1/16, causal=False, return_lse=True)
  3. o = sum_i exp(lse_i - logsumexp_j lse_j) * out_i over all partials, in float32, -> bf16.

FA4's SM90 forward has no split-KV (interface._flash_attn_fwd asserts num_splits == 1 on 9.x),
so a call launches only batch * 8 KV heads * ceil(2 * q_len / 128) CTAs (PackGQA: both query
heads of a KV head share one 128-row tile), 32 per sequence for q_len = 256: a quarter of an
H200's 132 SMs when batch is 1. Step 1 therefore splits the prefix into S chunks itself: the
chunks become S * batch sequences of one varlen call,
    flash_attn_varlen_func(q_rep, prefix_k.view(B*P, 8, 256), prefix_v.view(B*P, 8, 256),
                           cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                           softmax_scale=1/16, causal=False, return_lse=True)
with q repeated once per chunk (q_rep, a timed copy of q, S times 2 MiB per sequence). The prefix
K/V are read in place (a view of the contiguous inputs). S fills one wave of SMs (at most
SMs // CTAs-per-call) but keeps at least 512 keys per chunk; with S == 1 step 1 is the plain
dense call flash_attn_func(q, prefix_k, prefix_v, ...).

Layouts: FA4 takes [batch, seqlen, heads, dim] (the definition's layout) and maps query head h
to KV head h // (16 // 8) = h // 2, as the definition does. Returned lse is natural-log,
[batch, 16, q_len] for dense calls and [16, total_q] for varlen calls. prepare() builds only the
split plan (S and the two int32 cu_seqlens tensors, which depend on the shapes alone), so that
run() has no host synchronisation.
"""

import functools
import math
from typing import Any

import torch
from flash_attn.cute import flash_attn_func, flash_attn_varlen_func

HEAD_DIM = 256
SCALE = 1.0 / math.sqrt(HEAD_DIM)
TILE_M = 128  # FA4 SM90 forward tile rows for head dim 256 (interface._tile_size_fwd_sm90)
MIN_KEYS_PER_SPLIT = 512


@functools.cache
def _num_sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def prepare(q, prefix_k, prefix_v, k, v) -> dict[str, Any]:
    batch, q_len, num_qo_heads, _ = q.shape
    prefix_len, num_kv_heads = prefix_k.shape[1], prefix_k.shape[2]
    rows = q_len * (num_qo_heads // num_kv_heads)  # PackGQA rows per (sequence, KV head)
    ctas = max(1, batch * num_kv_heads * ((rows + TILE_M - 1) // TILE_M))
    splits = max(1, min(_num_sms(q.device) // ctas, prefix_len // MIN_KEYS_PER_SPLIT))
    if splits == 1:
        return {"splits": 1}
    chunk = (prefix_len + splits - 1) // splits
    splits = (prefix_len + chunk - 1) // chunk  # every chunk non-empty
    starts = [
        b * prefix_len + min(s * chunk, prefix_len) for b in range(batch) for s in range(splits)
    ]
    cu_k = torch.tensor([*starts, batch * prefix_len], dtype=torch.int32, device=q.device)
    cu_q = torch.arange(0, batch * splits + 1, dtype=torch.int32, device=q.device) * q_len
    return {"splits": splits, "chunk": chunk, "cu_seqlens_q": cu_q, "cu_seqlens_k": cu_k}


def run(q, prefix_k, prefix_v, k, v, prepared: dict[str, Any] | None = None) -> torch.Tensor:
    if prepared is None:
        prepared = prepare(q, prefix_k, prefix_v, k, v)
    batch, q_len, num_qo_heads, head_dim = q.shape
    prefix_len, num_kv_heads = prefix_k.shape[1], prefix_k.shape[2]

    out_c, lse_c = flash_attn_func(q, k, v, softmax_scale=SCALE, causal=False, return_lse=True)
    if prefix_len == 0:
        return out_c

    splits = prepared["splits"]
    if splits == 1:
        out_p, lse_p = flash_attn_func(
            q, prefix_k, prefix_v, softmax_scale=SCALE, causal=False, return_lse=True
        )
        out_p = out_p.unsqueeze(1)  # [B, 1, L, Hq, D]
        lse_p = lse_p.unsqueeze(1)  # [B, 1, Hq, L]
    else:
        q_rep = q.unsqueeze(1).expand(batch, splits, q_len, num_qo_heads, head_dim)
        q_rep = q_rep.reshape(batch * splits * q_len, num_qo_heads, head_dim)
        out_p, lse_p = flash_attn_varlen_func(
            q_rep,
            prefix_k.reshape(batch * prefix_len, num_kv_heads, head_dim),
            prefix_v.reshape(batch * prefix_len, num_kv_heads, head_dim),
            cu_seqlens_q=prepared["cu_seqlens_q"],
            cu_seqlens_k=prepared["cu_seqlens_k"],
            max_seqlen_q=q_len,
            max_seqlen_k=prepared["chunk"],
            softmax_scale=SCALE,
            causal=False,
            return_lse=True,
        )
        out_p = out_p.view(batch, splits, q_len, num_qo_heads, head_dim)
        lse_p = lse_p.view(num_qo_heads, batch, splits, q_len).permute(1, 2, 0, 3)

    # Exact merge of the partial softmaxes: weights softmax_i(lse_i), per (b, query, head).
    lse = torch.cat([lse_p, lse_c.unsqueeze(1)], dim=1)  # [B, S + 1, Hq, L]
    w = torch.softmax(lse, dim=1).transpose(2, 3).unsqueeze(-1)  # [B, S + 1, L, Hq, 1]
    o = (out_p.float() * w[:, :splits]).sum(dim=1) + out_c.float() * w[:, splits]
    return o.to(q.dtype)
