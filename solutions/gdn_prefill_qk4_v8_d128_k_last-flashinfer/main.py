"""FlashInfer 0.7.2 chunked Gated DeltaNet prefill: flashinfer.gdn_prefill.chunk_gated_delta_rule.

Mapping of the definition onto the library call (checked in flashinfer/gdn_prefill.py and
flashinfer/gdn_kernels/delta_rule_dsl/{delta_rule_sm90,delta_rule_cp_sm90,alpha,schedule}.py):
  q [T, 4, 128], k [T, 4, 128], v [T, 8, 128] bf16 -> q, k, v as given (contiguous, same layout).
      GVA (num_v_heads > num_q_heads == num_k_heads) is native: output/state head h reads
      q/k head h * num_q_heads // num_v_heads = h // 2, as in the definition.
  g [T, 8] float32, log-space   -> g=exp(g). FlashInfer's `g` is the decay factor alpha itself
      (the kernel takes log2(alpha + 1e-10) and prefix-sums it), so the log-space gate of the
      definition is exponentiated here, once per call (one small elementwise kernel, timed).
  beta [T, 8] float32           -> beta as given (float32 is required).
  cu_seqlens [N + 1] int32      -> cu_seqlens as given (int32 and int64 are both accepted).
  initial_state [N, 8, V, K] f32 -> initial_state as given: FlashInfer's state layout is the same
      k-last [N, H, V, K]; it is only read (the final state goes to a fresh output_state).
  scale                         -> scale (float).
  use_qk_l2norm_in_kernel=False: q and k are used as given.
  Outputs: o [T, 8, 128] bf16 (q's dtype) and final_state [N, 8, 128, 128] float32, k-last.

Per call: one exp over g ([T, 8] float32); everything else is the library call (allocating o and
final_state). The library routes by itself: on SM90 with num_seqs * 8 < 66 (H200: 132 SMs) it
takes the context-parallel CuTe-DSL path, otherwise the fully fused CuTe-DSL chunk kernel
(warp-specialised, TMA + WGMMA, 64-token chunks, state kept in registers). Both are compiled by
the CuTe DSL (MLIR, no nvcc) on the first call of each specialisation.

prepare() reads max_seqlen from cu_seqlens on the host: launch metadata that a serving engine
already holds in host memory; FlashInfer uses it only to size the context-parallel launch
(without it, it assumes total_seq_len, which is correct but may launch a larger grid).
"""

from typing import Any

import torch
from flashinfer.gdn_prefill import chunk_gated_delta_rule


def prepare(q, k, v, g, beta, cu_seqlens, initial_state, scale) -> dict[str, Any]:
    lengths = cu_seqlens[1:] - cu_seqlens[:-1]
    return {"max_seqlen": int(lengths.max().item())}


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    cu_seqlens: torch.Tensor,
    initial_state: torch.Tensor,
    scale: float,
    prepared: dict[str, Any] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    alpha = torch.exp(g.float())  # FlashInfer wants the decay factor, not its log
    o, final_state = chunk_gated_delta_rule(
        q.contiguous(),
        k.contiguous(),
        v.contiguous(),
        g=alpha,
        beta=beta.float().contiguous(),
        scale=float(scale),
        initial_state=initial_state.contiguous(),
        output_final_state=True,
        cu_seqlens=cu_seqlens.contiguous(),
        use_qk_l2norm_in_kernel=False,
        max_seqlen=None if prepared is None else prepared["max_seqlen"],
    )
    return o, final_state
