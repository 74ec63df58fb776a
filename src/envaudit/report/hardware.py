"""Peak figures of the GPUs results come from, for the roofline fraction.

Vendor datasheet figures for the SXM parts (dense tensor-core BF16, no sparsity; HBM
bandwidth). Every definition is judged against the BF16 peak: for kernels in other precisions
the fraction is stated against that one ceiling, which the report says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    dense_bf16_tflops: float
    memory_gbps: float


PEAKS = {
    "NVIDIA H100 80GB HBM3": Peak(dense_bf16_tflops=989.4, memory_gbps=3350.0),
    "NVIDIA H200": Peak(dense_bf16_tflops=989.4, memory_gbps=4800.0),
}


def peak_for(gpu_name: str) -> Peak | None:
    return PEAKS.get(gpu_name)
