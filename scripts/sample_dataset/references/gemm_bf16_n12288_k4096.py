"""Dense BF16 GEMM, weight in nn.Linear layout: out = a @ b^T.

Qwen3-8B's gate or up projection (hidden 4096 to intermediate 12288).
Shapes: a [M, 4096] bf16 (activations; the engine's batch and sequence dims flattened into M),
b [12288, 4096] bf16 (weight; row n holds output feature n), out [M, 12288] bf16.
    out[m, n] = sum_k a[m, k] * b[n, k]
Products and sums are float32 (true FP32, not TF32), rounded once to bfloat16 at the end.
"""

import torch


def run(a, b):
    return (a.float() @ b.float().T).to(torch.bfloat16)
