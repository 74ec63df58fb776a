"""FlashInfer 0.7.2 Gated DeltaNet decode step.

Entry point: flashinfer.gdn_decode.gated_delta_rule_decode_pretranspose, FlashInfer's T = 1
decode for a float32 state in the k-last ("pretranspose", v-major) layout [B, HV, V, K]: the
definition's layout, so no transpose is needed. With a float32 state it runs the CuTe-DSL kernel
gdn_kernels/gdn_decode_pretranspose.py (8 CTAs per (batch, value head), 16 state rows each,
cp.async double buffering), which per row of S does
    S *= exp(g);  d = beta * (v - S k);  S += d k^T;  o = S (scale * q)
(read-out with the updated state, value head h reads q/k head h // (HV // H) = h // 2).

Mapping of the definition onto the call (checked in flashinfer/gdn_decode.py and the kernel):
  q, k [B, 4, 128] bf16, v [B, 8, 128] bf16 -> unsqueeze(1) views [B, 1, H, 128].
  use_qk_l2norm=False (the API default is True): q and k are used as given.
  The API takes the raw gate inputs, not g and beta: inside the kernel
      g_k = -exp(A_log) * softplus(a + dt_bias)   (softplus threshold 20),  decay = exp(g_k)
      beta_k = sigmoid(b)
  so run() passes A_log = dt_bias = 0 (float32, [8], built once and cached) and per call
      a = log(expm1(-g))  (inverse softplus: softplus(a) = -g; g = 0 gives a = -inf, and the
                           kernel's softplus(-inf) = log(1 + exp(-inf)) = 0, decay 1),
      b = logit(beta),
  both kept float32 [B, 1, 8]: the kernel reads a and b through a Float32 conversion and keys
  its compile cache on their dtype, so float32 is accepted and the round trip is exact to
  float32 rounding (~1e-7 relative; bf16 a/b would cost ~1e-3 relative in the decay/beta).
  state [B, 8, V, K] float32 -> the API updates its `state` argument in place, and the
      definition's `state` is read-only, so run() copies it into the fresh new_state first and
      hands the copy to the kernel.
  scale -> scale (a compile-time constant of the kernel; one compile per distinct value).
  Outputs: output [B, 1, 8, 128] bf16 (preallocated with torch.empty, every element is
      written) -> squeeze(1) view; new_state = the copy the kernel updated.

Per call, beyond the kernel: the state copy (one read + one write of B*8*64 KB) and four tiny
elementwise kernels over [B, 8] for a and b.
"""

import functools

import torch
from flashinfer.gdn_decode import gated_delta_rule_decode_pretranspose


@functools.cache
def _zero_gate_params(device: torch.device, num_v_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A_log = 0 and dt_bias = 0, so the kernel's decay is exp(-softplus(a))."""
    a_log = torch.zeros(num_v_heads, dtype=torch.float32, device=device)
    dt_bias = torch.zeros(num_v_heads, dtype=torch.float32, device=device)
    return a_log, dt_bias


def run(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    state: torch.Tensor,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    batch_size, num_v_heads, head_v = v.shape
    a_log, dt_bias = _zero_gate_params(q.device, num_v_heads)
    a = torch.log(torch.expm1(-g.float())).unsqueeze(1)  # [B, 1, HV]: softplus(a) = -g
    b = torch.logit(beta.float()).unsqueeze(1)  # [B, 1, HV]: sigmoid(b) = beta
    new_state = torch.empty_like(state, memory_format=torch.contiguous_format)
    new_state.copy_(state)  # the kernel updates its state argument in place
    output = torch.empty(
        (batch_size, 1, num_v_heads, head_v), dtype=torch.bfloat16, device=q.device
    )
    output, _ = gated_delta_rule_decode_pretranspose(
        q.unsqueeze(1),
        k.unsqueeze(1),
        v.unsqueeze(1),
        new_state,
        a_log,
        a,
        dt_bias,
        b,
        scale=float(scale),
        output=output,
        use_qk_l2norm=False,
    )
    return output.squeeze(1), new_state
