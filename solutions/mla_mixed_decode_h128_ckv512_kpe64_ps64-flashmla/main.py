"""FlashMLA (flash_mla 1.0.0+9241ae3, sm_90a): dense MLA decode over the paged latent cache.

Library calls (flash_mla/flash_mla_interface.py at 9241ae3e):
    sched, _ = flash_mla.get_mla_metadata()
    out, lse = flash_mla.flash_mla_with_kvcache(
        q, kv_cache.unsqueeze(2), block_table, cache_seqlens, 512, sched,
        softmax_scale=sm_scale, causal=True)
which runs csrc/api/dense_decode.h: the SM90 split-KV kernel (flash_fwd_splitkv_mla_kernel)
and the combine kernel that merges the splits.

Mapping of the definition onto the call (no data is copied or converted):
  q [b, q_len, 128, 576] bf16 -> q as is: FlashMLA's (batch, seq_len_q, num_heads_q, head_dim),
      per head 512 latent dims then 64 RoPE dims, as in the definition. The kernel views it as
      [b, q_len * 128, 1, 576] (needs a view-compatible q; the harness's q is contiguous).
  kv_cache [num_pages, 64, 576] bf16 -> k_cache [num_pages, 64, 1, 576] through unsqueeze(2),
      a view. The definition already stores each token's 512 latent (ckv) and 64 RoPE (kpe)
      dims concatenated in one 576-dim row, which is FlashMLA's single-head K cache layout, so
      no concatenation is needed; V is the first 512 dims of the same rows (head_dim_v=512).
      Page size 64 is the only one the kernel takes.
  block_table [b, max_pages] int32 -> block_table, same meaning (pages in position order).
      The kernel reads only the first ceil(cache_seqlens[b] / 64) entries and masks positions
      >= cache_seqlens[b], so the trailing 0 entries and stale rows of the last page are never
      used (tests/test_flash_mla_dense_decoding.py fills those entries with 2147480000 and those
      cache rows with NaN and still matches its reference).
  cache_seqlens [b] int32 -> cache_seqlens, same meaning (the q_len new tokens included).
  sm_scale -> softmax_scale.
  causal=True: FlashMLA's mask is aligned to the end of the cache (the test's reference uses
      tril(diagonal=s_k - s_q)), so query i sees positions 0 .. n - q_len + i, as defined. For
      q_len = 1 the kernel drops the flag itself.
  out [b, q_len, 128, 512] bf16 -> o, same layout.
  lse [b, 128, q_len] float32 -> .transpose(1, 2), a view [b, q_len, 128] (not contiguous when
      q_len = 2; no copy). It is a natural log: the combine kernel divides its base-2 lse by
      log2(e), and the test checks it against torch.logsumexp to 1e-6.

Scheduling metadata and prepare(): at this commit get_mla_metadata() takes no arguments and
returns an empty FlashMLASchedMeta. The first flash_mla_with_kvcache call with it runs
get_mla_metadata_kernel (one warp) before the attention kernels; it splits the batch's 64-token
KV blocks over num_sm_parts = num_SMs / ceil(q_len * 128 / 64) partitions and stores
tile_scheduler_metadata and num_splits in the object; later calls with the object skip that
kernel. It reads only cache_seqlens and the shapes (batch, q_len, 128 heads, page size) - never
q, the cache or block_table - and FlashMLA documents reuse as valid while the shapes and the
cache_seqlens values stay the same. A serving engine has cache_seqlens before attention and,
as FlashMLA's README describes, builds the schedule once per decoding step and reuses it in
every layer. So prepare() builds it, by one flash_mla_with_kvcache call on an all-zero query
whose output is discarded (the only way this API fills the schedule); run() always computes
the attention itself. run() reuses the plan only when it is handed the very cache_seqlens
tensor the plan was built for (the harness passes prepare() and run() the same input objects);
otherwise it makes a fresh schedule inside the timed call.
"""

from dataclasses import dataclass

import torch
from flash_mla import flash_mla_with_kvcache, get_mla_metadata

HEAD_DIM_V = 512


@dataclass
class Plan:
    sched: object  # flash_mla.flash_mla_interface.FlashMLASchedMeta, filled by one call
    cache_seqlens: torch.Tensor  # the tensor the schedule was built from


def _decode(q, kv_cache, block_table, cache_seqlens, sm_scale, sched):
    return flash_mla_with_kvcache(
        q,
        kv_cache.unsqueeze(2),  # [num_pages, 64, 1, 576], one latent KV head
        block_table,
        cache_seqlens,
        HEAD_DIM_V,
        sched,
        softmax_scale=float(sm_scale),
        causal=True,
    )


def prepare(q, kv_cache, block_table, cache_seqlens, sm_scale) -> Plan:
    sched, _ = get_mla_metadata()
    _decode(torch.zeros_like(q), kv_cache, block_table, cache_seqlens, sm_scale, sched)
    return Plan(sched, cache_seqlens)


def run(q, kv_cache, block_table, cache_seqlens, sm_scale, prepared: Plan | None = None):
    if prepared is not None and prepared.cache_seqlens is cache_seqlens:
        sched = prepared.sched
    else:
        sched, _ = get_mla_metadata()  # filled by the call below
    out, lse = _decode(q, kv_cache, block_table, cache_seqlens, sm_scale, sched)
    return out, lse.transpose(1, 2)
