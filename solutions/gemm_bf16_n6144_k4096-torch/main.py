"""Plain PyTorch baseline: dense BF16 GEMM out = a @ b^T through torch.nn.functional.linear.

This is what a serving engine's unquantised linear layer does: one cuBLAS BF16 GEMM with FP32
accumulation and a single rounding to bf16 (on CPU, oneDNN/ATen's BF16 GEMM). The contract
forbids BF16 accumulation, so split-K reductions in reduced precision are disallowed for the
duration of the call (PyTorch's allow_bf16_reduced_precision_reduction flag, restored after).
"""

import torch
import torch.nn.functional as F


def run(a, b):
    matmul_flags = torch.backends.cuda.matmul
    previous = matmul_flags.allow_bf16_reduced_precision_reduction
    matmul_flags.allow_bf16_reduced_precision_reduction = False
    try:
        return F.linear(a, b)
    finally:
        matmul_flags.allow_bf16_reduced_precision_reduction = previous
