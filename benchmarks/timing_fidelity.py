"""How far the harness's timings are from the kernels' own durations (CUPTI, via torch.profiler).

For three calibration kernels (a large device-to-device copy, an 8192^3 BF16 GEMM, a ~5 us copy)
it prints: the harness eager and graph medians, the mean per call of the kernel time CUPTI
recorded for the same launches, their ratios, and the spread (max/min) of five repeated
harness medians.

Targets (issue 3): eager within 2% of kernel time for kernels >= 20 us; graph within 10% for the
~5 us kernel; spread under 1.02.

    python benchmarks/timing_fidelity.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from envaudit.harness.timing import flush_buffer, time_eager_cuda, time_graph_cuda

REPEATS = 5
PROFILED_CALLS = 50


def calibration_kernels(device: torch.device) -> dict[str, Callable[[int], Any]]:
    """Three single-kernel launches; the copies are elementwise kernels (not DMA memcpy)."""
    big_src = torch.randn(256 << 20, dtype=torch.float32, device=device)  # 1 GiB
    big_dst = torch.empty_like(big_src)
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    c = torch.empty(8192, 8192, dtype=torch.bfloat16, device=device)
    small_src = torch.randn(2 << 20, dtype=torch.float32, device=device)  # 8 MiB
    small_dst = torch.empty_like(small_src)
    return {
        "copy_1GiB": lambda i: torch.mul(big_src, 1.0, out=big_dst),
        "gemm_bf16_8192": lambda i: torch.matmul(a, b, out=c),
        "copy_8MiB": lambda i: torch.mul(small_src, 1.0, out=small_dst),
    }


def kernel_median_us(launch: Callable[[int], Any], device: torch.device) -> tuple[float, list[str]]:
    """Mean per call of the CUPTI durations of every kernel the launch ran (flush excluded),
    and those kernels' names. The flush kernel is recognised by profiling the flush alone."""
    flush = flush_buffer(device)
    for i in range(3):
        launch(i)
        flush.zero_()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as flush_only:
        flush.zero_()
        torch.cuda.synchronize(device)
    flush_names = {e.name for e in flush_only.events() if e.device_type.name == "CUDA"}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(PROFILED_CALLS):
            flush.zero_()
            launch(i)
        torch.cuda.synchronize(device)
    kernels = [
        e for e in prof.events() if e.device_type.name == "CUDA" and e.name not in flush_names
    ]
    per_call = sum(e.device_time for e in kernels) / PROFILED_CALLS
    return per_call, sorted({e.name[:80] for e in kernels})


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    device = torch.device("cuda")
    rows = []
    for name, launch in calibration_kernels(device).items():
        kernel_us, kernel_names = kernel_median_us(launch, device)
        eager = [time_eager_cuda(launch, 1, device).median_ms * 1e3 for _ in range(REPEATS)]
        graph = [time_graph_cuda(launch, 1, device).median_ms * 1e3 for _ in range(REPEATS)]
        rows.append(
            {
                "kernel": name,
                "cupti_kernels": kernel_names,
                "cupti_mean_us": kernel_us,
                "eager_median_us": statistics.median(eager),
                "graph_median_us": statistics.median(graph),
                "eager_ratio": statistics.median(eager) / kernel_us,
                "graph_ratio": statistics.median(graph) / kernel_us,
                "eager_spread": max(eager) / min(eager),
                "graph_spread": max(graph) / min(graph),
                "eager_repeats_us": eager,
                "graph_repeats_us": graph,
            }
        )
    header = f"{'kernel':18} {'cupti us':>10} {'eager us':>10} {'graph us':>10} "
    header += f"{'eager/k':>8} {'graph/k':>8} {'e spread':>9} {'g spread':>9}"
    print(header)
    for r in rows:
        print(
            f"{r['kernel']:18} {r['cupti_mean_us']:10.2f} {r['eager_median_us']:10.2f} "
            f"{r['graph_median_us']:10.2f} {r['eager_ratio']:8.4f} {r['graph_ratio']:8.4f} "
            f"{r['eager_spread']:9.4f} {r['graph_spread']:9.4f}"
        )
    record = {
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(record, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
