"""FlashMLA (flash_mla 1.0.0+9241ae3, sm_90a): sparse MLA decode on a bf16 cache, served by
FlashMLA's token-level sparse kernel with one query row per request.

Library call (flash_mla/flash_mla_interface.py at 9241ae3e):
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(
        q, kv_cache.unsqueeze(1), sparse_indices.unsqueeze(1), sm_scale, d_v=512)
which runs csrc/api/sparse_fwd.h -> sm90::fwd::run_fwd_phase1_kernel<576, false>, one kernel.

Why this entry point and not flash_mla_with_kvcache(indices=...): FlashMLA's dedicated sparse
*decode* kernel asserts is_fp8_kvcache (its cache rows are 656-byte FP8 NoPE + scales + bf16
RoPE records), which this bf16 definition does not have; quantising the cache would change the
numbers. flash_mla_sparse_fwd is the bf16 sparse kernel. It has no batch dimension and no
causal mask: each query row attends to exactly the slots its index row lists. A decode step
with one new token per request is therefore s_q = batch_size query rows, and the call computes
precisely the definition's math (the kernel is tested with s_q = 1 as well). The definition's
interface record names this function for this definition.

Mapping of the definition onto the call (no data is copied or converted):
  q [batch_size, 128, 576] bf16 -> q [s_q, h_q, d_qk] as is (512 latent then 64 RoPE dims).
  kv_cache [num_slots, 576] bf16 -> kv [s_kv, h_kv=1, 576] through unsqueeze(1), a view;
      V is the first d_v = 512 dims of the same rows.
  sparse_indices [batch_size, 2048] int32 -> indices [s_q, 1, 2048] through unsqueeze(1), a
      view. Slot ids; the kernel masks -1 (or ids >= s_kv) per entry, anywhere in the row.
  sm_scale -> sm_scale.
  out [batch_size, 128, 512] bf16 -> o. lse [batch_size, 128] float32 -> lse, natural log:
      the kernel stores logf(sum) + max * ln 2 of its base-2 running sums, and tests/ref.py
      checks it against torch.logsumexp to 1e-6. max_logits is dropped.
The optional topk_length is not passed (see the sparse-prefill solution's note).
"""

import torch
from flash_mla import flash_mla_sparse_fwd

HEAD_DIM_V = 512


def run(
    q: torch.Tensor, kv_cache: torch.Tensor, sparse_indices: torch.Tensor, sm_scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    out, _max_logits, lse = flash_mla_sparse_fwd(
        q,
        kv_cache.unsqueeze(1),  # [num_slots, 1, 576]: one latent KV head
        sparse_indices.unsqueeze(1),  # [batch_size, 1, 2048]: one query row per request
        float(sm_scale),
        d_v=HEAD_DIM_V,
    )
    return out, lse
