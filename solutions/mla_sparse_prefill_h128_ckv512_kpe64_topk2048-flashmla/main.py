"""FlashMLA (flash_mla 1.0.0+9241ae3, sm_90a): token-level sparse MLA prefill.

Library call (flash_mla/flash_mla_interface.py at 9241ae3e):
    out, max_logits, lse = flash_mla.flash_mla_sparse_fwd(
        q, kv_cache.unsqueeze(1), sparse_indices.unsqueeze(1), sm_scale, d_v=512)
which runs csrc/api/sparse_fwd.h -> sm90::fwd::run_fwd_phase1_kernel<576, false>, one kernel.

Mapping of the definition onto the call (no data is copied or converted):
  q [num_tokens, 128, 576] bf16 -> q [s_q, h_q, d_qk] as is (512 latent dims then 64 RoPE dims
      per head; h_q must be 64 or 128, d_qk 576 or 512).
  kv_cache [num_slots, 576] bf16 -> kv [s_kv, h_kv=1, 576] through unsqueeze(1), a view. The
      latent (512) and RoPE (64) dims are already one 576-dim row per slot, FlashMLA's layout;
      V is the first d_v = 512 dims of the same rows.
  sparse_indices [num_tokens, 2048] int32 -> indices [s_q, h_kv=1, topk] through unsqueeze(1),
      a view. Both are slot ids into the cache; the kernel treats -1 (or any id >= s_kv) as an
      invalid entry, masking its score to -inf, wherever it sits in the row. topk = 2048 meets
      the kernel's topk % 128 == 0. No further mask is applied, as the definition requires
      (causality is in the selection).
  sm_scale -> sm_scale.
  out [num_tokens, 128, 512] bf16 -> o. lse [num_tokens, 128] float32 -> lse. The kernel writes
      lse = ln(sum exp(sm_scale * q.k)): it keeps base-2 running sums and stores
      logf(sum) + max * ln 2, and tests/ref.py checks it against torch.logsumexp to 1e-6
      (the README's "log2sumexp2" description is stale). max_logits is dropped.
The optional topk_length (per-row valid count) is not passed: the per-entry -1 mask is the
definition's contract, and deriving lengths would cost extra timed kernels per call.
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
        sparse_indices.unsqueeze(1),  # [num_tokens, 1, 2048]
        float(sm_scale),
        d_v=HEAD_DIM_V,
    )
    return out, lse
