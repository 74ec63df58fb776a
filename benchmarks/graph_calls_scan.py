"""How the graph-mode figure of a small kernel depends on the calls captured per graph.

Each replay pays a fixed cost (graph launch, the first kernel after the L2 flush writing back
dirty lines) that the calls in the graph share; the rest of the per-call excess over the kernel's
own duration is the node-to-node gap. For an 8 MiB and a 4 MiB copy (about 5 and 3.4 us on an
H200) this times the harness's graph mode at fixed calls per graph and divides by the median
CUPTI kernel duration of the same launches; three repeats each (median, and max/min spread).
The harness's GRAPH_CALLS_TARGET_US / MAX_GRAPH_CALLS were chosen from this scan.

    python benchmarks/graph_calls_scan.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.timing_fidelity import heat_up
from envaudit.harness import timing

CALLS = (1, 4, 16, 20, 32, 64, 128, 256)
COPIES = 8


def flush_kernel_names(device: torch.device) -> set[str]:
    flush = timing.flush_buffer(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush.zero_()
        torch.cuda.synchronize(device)
    return {e.name for e in prof.events() if e.device_type.name == "CUDA"}


def cupti_kernel_us(launch: Any, flush_names: set[str]) -> float:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(400):
            launch(i % COPIES)
        torch.cuda.synchronize()
    durations = [
        e.device_time
        for e in prof.events()
        if e.device_type.name == "CUDA" and e.name not in flush_names
    ]
    return float(statistics.median(durations))


def scan(mib: int, device: torch.device, flush_names: set[str]) -> dict[str, Any]:
    srcs = [torch.randn((mib << 20) // 4, device=device) for _ in range(COPIES)]
    dsts = [torch.empty_like(s) for s in srcs]

    def launch(i: int) -> Any:
        return torch.mul(srcs[i], 1.0, out=dsts[i])

    heat_up(launch, COPIES, 1.0)
    cupti = cupti_kernel_us(launch, flush_names)
    row: dict[str, Any] = {"cupti_us": cupti}
    saved = timing.MAX_GRAPH_CALLS, timing.GRAPH_CALLS_TARGET_US
    try:
        for calls in CALLS:
            timing.MAX_GRAPH_CALLS, timing.GRAPH_CALLS_TARGET_US = calls, 1e9
            medians = [
                timing.time_graph_cuda(launch, COPIES, device).median_ms * 1e3 for _ in range(3)
            ]
            median = statistics.median(medians)
            row[str(calls)] = [
                round(median, 3),
                round(median / cupti, 4),
                round(max(medians) / min(medians), 4),
            ]
            print(
                f"{mib} MiB copy, {calls:3d} calls/graph: {median:7.3f} us,"
                f" {median / cupti:.4f} x CUPTI {cupti:.3f} us",
                flush=True,
            )
    finally:
        timing.MAX_GRAPH_CALLS, timing.GRAPH_CALLS_TARGET_US = saved
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    device = torch.device("cuda")
    flush_names = flush_kernel_names(device)
    result = {f"{mib}MiB": scan(mib, device, flush_names) for mib in (8, 4)}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
