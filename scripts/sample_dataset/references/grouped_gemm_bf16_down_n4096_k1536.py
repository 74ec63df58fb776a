"""MoE grouped BF16 GEMM over contiguous per-expert row ranges (no padding).

Qwen3-235B-A22B's expert down projection: moe_intermediate 1536 to hidden 4096.
Shapes: a [M, 1536] bf16 (token rows already sorted by expert), w [num_experts, 4096, 1536] bf16
(one nn.Linear-layout weight per expert), m_offsets [num_experts + 1] int32, out [M, 4096] bf16.

Expert e owns rows m_offsets[e] .. m_offsets[e + 1] - 1 of a and of out, with m_offsets[0] = 0,
m_offsets[num_experts] = M and m_offsets non-decreasing (an expert may own no rows).
For every expert e and each row m it owns:
    out[m, n] = sum_k a[m, k] * w[e, n, k]
Products and sums are float32 (true FP32, not TF32), rounded once to bfloat16 at the end.
"""

import torch


def run(a, w, m_offsets):
    out = torch.empty(a.shape[0], w.shape[1], dtype=torch.bfloat16, device=a.device)
    offsets = m_offsets.tolist()
    for e in range(w.shape[0]):
        start, end = offsets[e], offsets[e + 1]
        out[start:end] = (a[start:end].float() @ w[e].float().T).to(torch.bfloat16)
    return out
