"""Time one prepared launch: eagerly with device events, or as a replayed CUDA graph.

Stopping rule: after warm-up (at least WARMUP_MIN_ITERS calls and WARMUP_MIN_MS of work), the
per-call time is estimated and enough iterations are run to cover TARGET_MEASURE_MS of measured
time, clamped to [MIN_ITERS, MAX_ITERS]. Before every timed iteration the L2 cache is flushed by
writing a buffer of twice its size, and the launch reads the next of several rotating input
copies, so no iteration finds its operands in cache. The flush also gives the host time to queue
the launch before the start event fires, so launch latency is not counted as kernel time.
Graph mode captures GRAPH_CALLS_TARGET_US worth (up to MAX_GRAPH_CALLS) of back-to-back calls
(on rotating input copies) into one CUDA graph, flushes L2 before each replay and reports replay
time divided by the calls in it: the steady state of a captured decode step, with launch
latency amortised as it is when an engine replays graphs. Small kernels get many calls per
graph, large ones one.
On a CPU there are no events: a wall clock brackets each call, and the record says so.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

WARMUP_MIN_ITERS = 3
WARMUP_MIN_MS = 25.0
MIN_ITERS = 10
MAX_ITERS = 1000
TARGET_MEASURE_MS = 300.0
CPU_TARGET_MEASURE_MS = 200.0
CPU_MIN_ITERS = 3
CPU_MAX_ITERS = 50
L2_FLUSH_MIN_BYTES = 64 << 20
MAX_GRAPHS = 4
# Each replay pays a fixed cost (graph launch; the first kernel after the flush writes back
# dirty L2 lines) that the calls in the graph share. On the H200 the ~5 us copy kernel read
# 1.116x its CUPTI time at 20 calls per graph, 1.087x at 64, 1.079x at 128
# (benchmarks/graph_calls_scan.py, docs/benchmarks.md): ~1 ms of calls, up to 128, puts small
# kernels within 10% of their kernel time; what remains is the node-to-node gap that a
# replayed decode step pays too.
GRAPH_CALLS_TARGET_US = 1000.0
MAX_GRAPH_CALLS = 128

Launch = Callable[[int], Any]
"""Runs one call on rotating input copy number i."""


class GraphCaptureError(RuntimeError):
    """The launch could not be captured into a CUDA graph (recorded beside the result)."""


@dataclass
class TimingStats:
    mode: str
    """cuda_events, cuda_graph or wall_clock."""
    median_ms: float
    min_ms: float
    max_ms: float
    q1_ms: float
    q3_ms: float
    iqr_ms: float
    mean_ms: float
    iterations: int
    warmup_iterations: int
    calls_per_sample: int
    input_copies: int
    l2_flush_bytes: int
    warmup_wall_ms: float | None = None
    """Host wall time of the warm-up (for graphs: of capture and warm-up together)."""
    measure_wall_ms: float | None = None
    """Host wall time of the measured iterations, from the first launch to the last sync."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    samples: list[float], mode: str, warmup: int, copies: int, flush_bytes: int, calls: int = 1
) -> TimingStats:
    ordered = sorted(samples)
    q1, _, q3 = statistics.quantiles(ordered, n=4) if len(ordered) > 1 else (ordered * 3)
    return TimingStats(
        mode=mode,
        median_ms=statistics.median(ordered),
        min_ms=ordered[0],
        max_ms=ordered[-1],
        q1_ms=q1,
        q3_ms=q3,
        iqr_ms=q3 - q1,
        mean_ms=statistics.fmean(ordered),
        iterations=len(ordered),
        warmup_iterations=warmup,
        calls_per_sample=calls,
        input_copies=copies,
        l2_flush_bytes=flush_bytes,
    )


def _iterations(estimate_ms: float, target: float, lo: int, hi: int) -> int:
    if estimate_ms <= 0:
        return hi
    return max(lo, min(hi, int(target / estimate_ms) + 1))


def flush_buffer(device: torch.device) -> torch.Tensor:
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    return torch.empty(max(2 * l2, L2_FLUSH_MIN_BYTES), dtype=torch.uint8, device=device)


def _cuda_warmup(launch: Launch, copies: int) -> tuple[int, float]:
    """Warm up; return (iterations, estimated ms per call)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    done, elapsed = 0, 0.0
    while done < WARMUP_MIN_ITERS or elapsed < WARMUP_MIN_MS:
        start.record()
        launch(done % copies)
        end.record()
        end.synchronize()
        elapsed += start.elapsed_time(end)
        done += 1
        if done >= MAX_ITERS:
            break
    return done, elapsed / done


def _event_loop(step: Launch, n: int, copies: int, flush: torch.Tensor) -> list[float]:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        step(i % copies)
        ends[i].record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def time_eager_cuda(launch: Launch, copies: int, device: torch.device) -> TimingStats:
    flush = flush_buffer(device)
    started = time.perf_counter()
    warmup, estimate = _cuda_warmup(launch, copies)
    warmup_wall = _ms_since(started)
    n = _iterations(estimate, TARGET_MEASURE_MS, MIN_ITERS, MAX_ITERS)
    started = time.perf_counter()
    samples = _event_loop(launch, n, copies, flush)
    stats = summarize(samples, "cuda_events", warmup, copies, flush.numel())
    stats.warmup_wall_ms, stats.measure_wall_ms = warmup_wall, _ms_since(started)
    return stats


def time_graph_cuda(launch: Launch, copies: int, device: torch.device) -> TimingStats:
    """Capture graphs of back-to-back calls and time their replays (see module docstring)."""
    started = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):
            for i in range(copies):
                launch(i)
        torch.cuda.current_stream(device).wait_stream(side)
        _, estimate_ms = _cuda_warmup(launch, copies)
        calls = max(1, min(MAX_GRAPH_CALLS, int(GRAPH_CALLS_TARGET_US / 1e3 / estimate_ms)))
        graphs = []
        for g in range(min(copies, MAX_GRAPHS)):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for j in range(calls):
                    launch((g + j) % copies)
            graphs.append(graph)
        torch.cuda.synchronize(device)
    except Exception as exc:
        torch.cuda.synchronize(device)
        raise GraphCaptureError(f"{type(exc).__name__}: {exc}") from exc

    def replay(i: int) -> None:
        graphs[i].replay()

    flush = flush_buffer(device)
    warmup, estimate = _cuda_warmup(replay, len(graphs))
    warmup_wall = _ms_since(started)
    n = _iterations(estimate, TARGET_MEASURE_MS, MIN_ITERS, MAX_ITERS)
    started = time.perf_counter()
    samples = [t / calls for t in _event_loop(replay, n, len(graphs), flush)]
    stats = summarize(samples, "cuda_graph", warmup, copies, flush.numel(), calls)
    stats.warmup_wall_ms, stats.measure_wall_ms = warmup_wall, _ms_since(started)
    return stats


def time_wall_clock(launch: Launch, copies: int) -> TimingStats:
    warmup = 0
    t0 = time.perf_counter()
    while warmup < 1 or (warmup < WARMUP_MIN_ITERS and time.perf_counter() - t0 < 0.05):
        launch(warmup % copies)
        warmup += 1
    estimate = (time.perf_counter() - t0) * 1e3 / warmup
    n = _iterations(estimate, CPU_TARGET_MEASURE_MS, CPU_MIN_ITERS, CPU_MAX_ITERS)
    warmup_wall = _ms_since(t0)
    samples = []
    started = time.perf_counter()
    for i in range(n):
        start = time.perf_counter()
        launch(i % copies)
        samples.append((time.perf_counter() - start) * 1e3)
    stats = summarize(samples, "wall_clock", warmup, copies, 0)
    stats.warmup_wall_ms, stats.measure_wall_ms = warmup_wall, _ms_since(started)
    return stats
