"""What the eager timer reads when the host queues a call more slowly than the GPU flushes L2,
and what a GPU-side pad before each start event would read instead.

The harness's eager timer flushes L2 before every call, and the flush is what keeps the GPU
busy while the host queues the call. A call whose host side takes longer than the flush (a
Triton kernel's Python wrapper) leaves the GPU idle inside the start/end bracket, so the figure
counts host time (s62 in docs/lab/audit-throughput.md). This benchmark measures that on a ~5 us
copy and a ~40 us copy, each behind a host-side wait of 0, 50 and 200 us per call (a stand-in for a
wrapper's Python), timed three ways, five times each:

- `eager`: the harness's eager timer as it is;
- `eager, padded`: the same stopping rule with a `torch.cuda._sleep` queued after each flush,
  long enough (twice the host's median time to queue one call, less the flush's own GPU time)
  for the host to have queued the call before the GPU reaches the start event;
- `graph`: the harness's graph timer.

Each figure is compared with the CUPTI duration of the copy kernel in a measurement of the same
method taken right after it. Not a mode of the harness: it asks what such a pad would change
(accuracy, spread, wall time) before anyone decides whether the eager figure should be the
device's time for such calls.

    python benchmarks/eager_padding.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from timing_fidelity import cell, clock, cupti_kernel_us, kernel_names

from envaudit.harness.timing import (
    _measure,
    flush_buffer,
    summarize,
    time_eager_cuda,
    time_graph_cuda,
)

REPEATS = 5
COPIES = 8
HOST_WAITS_US = (0.0, 50.0, 200.0)
PROBE_CALLS = 200


def copy_kernel(elements: int, device: torch.device) -> Callable[[int], Any]:
    srcs = [torch.randn(elements, device=device) for _ in range(COPIES)]
    dsts = [torch.empty_like(s) for s in srcs]
    return lambda i: torch.mul(srcs[i], 1.0, out=dsts[i])


def behind_host_wait(launch: Callable[[int], Any], wait_us: float) -> Callable[[int], Any]:
    """The launch after `wait_us` of host work (a busy wait, as a wrapper's Python would be)."""

    def call(i: int) -> Any:
        until = time.perf_counter() + wait_us / 1e6
        while time.perf_counter() < until:
            pass
        return launch(i)

    return call


class PaddedFlush:
    """The harness's flush buffer, followed on the GPU by a sleep of `cycles` clock cycles."""

    def __init__(self, flush: torch.Tensor, cycles: int) -> None:
        self.flush, self.cycles = flush, cycles

    def zero_(self) -> None:
        self.flush.zero_()
        if self.cycles:
            torch.cuda._sleep(self.cycles)

    def numel(self) -> int:
        return self.flush.numel()


def gpu_ms(
    work: Callable[[], Any], repeats: int = 20, before: Callable[[], Any] | None = None
) -> float:
    """Median GPU time of `work`, by events (`before` is queued ahead of each start event)."""
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before is not None:
            before()
        start.record()
        work()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def padded_eager(launch: Callable[[int], Any], device: torch.device) -> dict[str, Any]:
    """Eager timing with a pad after each flush (module docstring): its TimingStats as a dict,
    with the pad and the host time it was sized from."""
    flush = flush_buffer(device)
    host = []
    for i in range(PROBE_CALLS):  # also the warm-up
        start = time.perf_counter()
        launch(i % COPIES)
        host.append((time.perf_counter() - start) * 1e3)
        torch.cuda.synchronize()
    host_ms = statistics.median(host)
    flush_ms = gpu_ms(flush.zero_)
    cycles_per_ms = 1_000_000 / gpu_ms(lambda: torch.cuda._sleep(1_000_000))
    pad_ms = max(0.0, 2 * host_ms - flush_ms)
    padded = PaddedFlush(flush, int(pad_ms * cycles_per_ms))
    estimate_ms = gpu_ms(lambda: launch(0), before=padded.zero_)
    started = time.perf_counter()
    measured = _measure(launch, COPIES, padded, estimate_ms, 1, clock())  # type: ignore[arg-type]
    stats = summarize(measured.samples, "cuda_events", PROBE_CALLS, COPIES, flush.numel())
    record = stats.as_dict()
    record.update(
        stop=measured.stop,
        measure_wall_ms=(time.perf_counter() - started) * 1e3,
        host_ms=host_ms,
        flush_ms=flush_ms,
        pad_ms=pad_ms,
    )
    return record


def methods(
    launch: Callable[[int], Any], device: torch.device
) -> dict[str, Callable[[], dict[str, Any]]]:
    return {
        "eager": lambda: time_eager_cuda(launch, COPIES, device, clock()).as_dict(),
        "eager, padded": lambda: padded_eager(launch, device),
        "graph": lambda: time_graph_cuda(launch, COPIES, device, clock()).as_dict(),
    }


def median_us(records: list[dict[str, Any]], key: str) -> float | None:
    """The median of a per-measurement figure in ms, as us (None where the method has none)."""
    return statistics.median(r[key] * 1e3 for r in records) if key in records[0] else None


def rows_for(name: str, launch: Callable[[int], Any], device: torch.device) -> list[dict[str, Any]]:
    names = kernel_names(launch)
    out = []
    for method, measure in methods(launch, device).items():
        records, walls, ratios = [], [], []
        for _ in range(REPEATS):
            start = time.perf_counter()
            records.append(measure())
            walls.append(time.perf_counter() - start)
            _, cupti = cupti_kernel_us(lambda m=measure: m()["median_ms"] * 1e3, names)
            if cupti:
                ratios.append(records[-1]["median_ms"] * 1e3 / cupti)
        figures = [r["median_ms"] * 1e3 for r in records]
        out.append(
            {
                "kernel": name,
                "method": method,
                "median_us": statistics.median(figures),
                "ratio_to_cupti": statistics.median(ratios) if ratios else None,
                "spread": max(figures) / min(figures),
                "wall_median_s": statistics.median(walls),
                "iterations": statistics.median(r["iterations"] for r in records),
                "stops": sorted({str(r["stop"]) for r in records}),
                "pad_us": median_us(records, "pad_ms"),
                "host_us": median_us(records, "host_ms"),
                "records": records,
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    device = torch.device("cuda")
    kernels = {"copy 8 MiB": 2 << 20, "copy 64 MiB": 16 << 20}
    rows = []
    for label, elements in kernels.items():
        base = copy_kernel(elements, device)
        for wait in HOST_WAITS_US:
            name = f"{label}, host {wait:g} us"
            rows += rows_for(name, behind_host_wait(base, wait), device)
    print(
        f"{'kernel':28} {'method':14} {'us':>9} {'/cupti':>7} {'spread':>7} {'wall s':>7}"
        f" {'iters':>6} {'host us':>8} {'pad us':>7}  stops"
    )
    for r in rows:
        print(
            f"{r['kernel']:28} {r['method']:14} {r['median_us']:9.2f}"
            f" {cell(r['ratio_to_cupti'], 7, 3)} {r['spread']:7.3f} {r['wall_median_s']:7.3f}"
            f" {r['iterations']:6.0f} {cell(r['host_us'], 8, 1)} {cell(r['pad_us'], 7, 1)}"
            f"  {','.join(r['stops'])}"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {"device": torch.cuda.get_device_name(device), "rows": rows}, handle, indent=2
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
