"""Plain PyTorch baseline: MoE grouped BF16 GEMM as a Python loop over experts.

The per-expert row ranges are read to the host once (m_offsets.tolist(), one sync), experts
with no rows are skipped, and each expert's rows go through one cuBLAS BF16 GEMM (FP32
accumulation, one rounding to bf16) written straight into its slice of the output. This is the
fallback MoE path of a serving engine without a grouped-GEMM kernel: one GEMM launch per active
expert. The contract forbids BF16 accumulation, so reduced-precision split-K reductions are
disallowed for the duration of the call (restored after).
"""

import torch


def run(a, w, m_offsets):
    num_rows, num_out = a.shape[0], w.shape[1]
    out = torch.empty(num_rows, num_out, dtype=torch.bfloat16, device=a.device)
    offsets = m_offsets.tolist()
    matmul_flags = torch.backends.cuda.matmul
    previous = matmul_flags.allow_bf16_reduced_precision_reduction
    matmul_flags.allow_bf16_reduced_precision_reduction = False
    try:
        for expert in range(w.shape[0]):
            start, end = offsets[expert], offsets[expert + 1]
            if end > start:
                torch.mm(a[start:end], w[expert].t(), out=out[start:end])
    finally:
        matmul_flags.allow_bf16_reduced_precision_reduction = previous
    return out
