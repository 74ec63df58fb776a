"""Why the graph figure of a small kernel moved with timing integrity: what one replay holds.

On one H200 the harness before timing integrity read 2.35 us per call for the Triton GDN decode
at `b1` and 15.47 us for the flex audio attention at `smoke-5chunks`; the harness with the judge
reads 2.02 and 12.86 us (docs/results/h200/timing-integrity). Both replay 256 calls over 8 input
copies. What differs is what a captured call's output is: the judged harness keeps every
call's returned tensor (the judge reads them), so the graph's 256 outputs are distinct memory;
before, each was dropped as the next call was captured, so the graph's pool could give every
call the same block. This captures the solution's calls both ways in one process and times the
replays as the harness does (events around each replay, the L2 flushed before it), and sums
CUPTI's kernel durations inside the replays (the flush's own kernel left out), so each way's
event figure stands beside the kernels' own time.

    python benchmarks/graph_replay_cupti.py --solution gdn_decode_qk4_v8_d128_k_last-triton \\
        --workload b1 --json OUT.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch
from graph_modes import solution_calls  # this folder: the script's own
from torch.profiler import ProfilerActivity, profile

from envaudit.harness.timing import _event_loop, flush_buffer

CALLS = 256
REPLAYS = 100
PROFILED = 20


def capture(launch: Any, copies: int, keep: bool) -> tuple[torch.cuda.CUDAGraph, list[Any]]:
    """One graph of CALLS calls on rotating copies; with `keep`, every returned output kept
    alive (distinct memory, as the judged harness has it), else dropped at once."""
    kept: list[Any] = []
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for j in range(CALLS):
            out = launch(j % copies)
            if keep:
                kept.append(out)
    torch.cuda.synchronize()
    return graph, kept


def measure(graph: torch.cuda.CUDAGraph, flush: torch.Tensor) -> dict[str, float]:
    graph.replay()
    torch.cuda.synchronize()
    events = _event_loop(lambda i: graph.replay(), REPLAYS, 1, flush)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(PROFILED):
            flush.zero_()
            graph.replay()
        torch.cuda.synchronize()
    kernels = [
        e.device_time
        for e in prof.events()
        if e.device_type.name == "CUDA" and "fill" not in e.name.lower()
    ]
    return {
        "event_us_per_call": statistics.median(events) / CALLS * 1e3,
        "kernel_sum_us_per_call": sum(kernels) / (PROFILED * CALLS),
        "kernels_per_call": len(kernels) / (PROFILED * CALLS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solution", required=True)
    parser.add_argument("--workload", required=True)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device("cuda:0")
    launch, copies = solution_calls(args.solution, args.workload, device)
    flush = flush_buffer(device)
    result: dict[str, Any] = {"solution": args.solution, "workload": args.workload}
    for name, keep in (("dropped", False), ("kept", True), ("dropped again", False)):
        graph, kept = capture(launch, len(copies), keep)
        result[name] = measure(graph, flush)
        del graph, kept
        torch.cuda.synchronize()
        print(name, json.dumps(result[name]))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
