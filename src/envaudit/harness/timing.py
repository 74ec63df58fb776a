"""Time one prepared launch: eagerly with device events, or as a replayed CUDA graph.

Warm-up: at least WARMUP_MIN_ITERS calls and WARMUP_MIN_MS of work, and, where NVML reads the
SM clock (once per CLOCK_READ_EVERY_MS of work), until the clock has stopped moving: the mean of
the last CLOCK_HALF_READS readings within CLOCK_TREND_TOLERANCE of the mean of the ones before,
for at most WARMUP_MAX_MS. A GPU that was idle boosts up within milliseconds and a heavy kernel
pulls the clock down to its power limit over a few hundred; at that limit the clock dithers by a
few percent around a steady level, so it is the trend that is compared, not single readings.
NVML refreshes what it reads only every ~100 ms, so where it reads the board's power too, the
warm-up also lasts until a power figure taken while the kernel ran has come, and for a kernel
drawing near the limit, until the limit shows (power_heated): before the power controller acts
such a kernel runs at its boost clock, a few percent faster than it can hold.
The per-call estimate is taken from the warm-up's second half.
Stopping rule: iterations run in batches; the first covers MIN_MEASURE_MS of measured time (at
least MIN_ITERS iterations), each later one doubles the count, and measuring stops as soon as
the 95% confidence interval of the median (distribution-free, from order statistics) is within
PRECISION of the median on either side, or when TARGET_MEASURE_MS of measured time (the
`budget_ms` argument) or MAX_ITERS iterations are reached. While the SM clock moves by more than
CLOCK_HOLD_TOLERANCE, or NVML reports a power or thermal limit, a tight median is not enough:
measuring goes on until WANDER_MIN_MEASURE_MS of measured time as well (the whole budget). A
steady kernel is done in tens of milliseconds; a power-limited or noisy one gets the budget.
The record says why measuring stopped, how tight the median was and the range of the clock.
Before every timed iteration the L2 cache is flushed by writing a buffer of twice its size, and
the launch reads the next of several rotating input copies, so no iteration finds its operands
in cache. The flush also gives the host time to queue the launch before the start event fires,
so launch latency is not counted as kernel time, as long as the host queues a call faster than
the GPU flushes (tens of microseconds on the H200). A call whose host side takes longer (the
Python wrapper of a Triton kernel, say) leaves the GPU waiting between the start event and the
kernel: its eager figure is then mostly host time, varies with the host's load and tends to run
to MAX_ITERS (GDN decode's smallest workload on the H200: 0.054 ms eager, 0.0025 ms per call in
a graph; s62 in docs/lab/audit-throughput.md). The graph figure is the device's.
Graph mode captures GRAPH_CALLS_TARGET_US worth (up to MAX_GRAPH_CALLS, and no more than the
window's graph_call_cap) of back-to-back calls (on rotating input copies, where a judged window
gives each call a fresh input of its own) into one CUDA graph, or into up to MAX_GRAPHS that
take turns when a graph holds fewer calls than there are copies (sized again from the replays'
own time when a launch-bound estimate made it too small), flushes L2 before each replay and
reports replay time divided by the calls in it: the steady state of a captured decode step, with
launch latency amortised as it is when an engine replays graphs. Small kernels get many calls
per graph, large ones one. Given the eager estimate, it skips warming up the uncaptured launch.
On a CPU there are no events: a wall clock brackets each call, and the record says so.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

import torch

from envaudit.harness.environment import SmClock

WARMUP_MIN_ITERS = 3
WARMUP_MIN_MS = 25.0
WARMUP_MAX_MS = 1000.0
CLOCK_READ_EVERY_MS = 5.0
CLOCK_HALF_READS = 3
CLOCK_TREND_TOLERANCE = 0.02
CLOCK_HOLD_TOLERANCE = 0.01
MIN_ITERS = 10
MAX_ITERS = 1000
MIN_MEASURE_MS = 10.0
TARGET_MEASURE_MS = 300.0
PRECISION = 0.005
# At the power limit the SM clock wanders (a BF16 GEMM on the H200: 1470-1530 MHz, every read
# limited), so a tight median of a short measurement is one clock's, not the kernel's. Cut into
# consecutive windows, 10 s of its calls gave medians whose coefficient of variation was 1.4% at
# 20 ms, 1.1% at 80-100 ms, 0.8% at 150 ms and 0.3% at 300 ms (benchmarks/clock_window.py,
# docs/lab/audit-throughput.md): such a measurement lasts the whole budget. A benchmark can pass a
# shorter window (`wander_ms`) to compare.
WANDER_MIN_MEASURE_MS = TARGET_MEASURE_MS
CPU_TARGET_MEASURE_MS = 200.0
CPU_MIN_ITERS = 3
CPU_MAX_ITERS = 50
# NVML refreshes the clock, its reasons and the board power every ~100 ms on the H200, and a
# kernel that draws more than the limit keeps its boost clock until the controller acts, 60-80
# ms after it began there (s58): so a warm-up with the clock readable lasts until a power figure
# refreshed at least POWER_SAMPLE_AFTER_MS into it (the kernel's own draw), and, when that
# figure is within POWER_BOUND_SHARE of the limit, until the limit shows (power_heated).
POWER_SAMPLE_AFTER_MS = 10.0
POWER_BOUND_SHARE = 0.9
L2_FLUSH_MIN_BYTES = 64 << 20
MAX_GRAPHS = 4
MAX_INPUT_COPIES = 8
"""Input copies a measurement rotates over, at most (as many as fit the rotation budget)."""
# Each replay pays a fixed cost (graph launch; the first kernel after the flush writes back
# dirty L2 lines) that the calls in the graph share. On the H200 the ~5 us copy kernel read
# 1.116x its CUPTI time at 20 calls per graph, 1.087x at 64, 1.079x at 128, 1.073x at 256
# (benchmarks/graph_calls_scan.py, docs/lab/timing-fidelity.md): a replay costs about one call of
# its own, and what remains is the node-to-node gap (~0.37 us) that a replayed decode step pays
# too. The count comes from the eager estimate, which launch latency inflates for small
# kernels (~9 us for that copy), so ~2 ms of estimated calls gives it ~220 of them.
GRAPH_CALLS_TARGET_US = 2000.0
MAX_GRAPH_CALLS = 256

Launch = Callable[[int], Any]
"""Runs one call on rotating input copy number i."""


class Window:
    """What a measurement tells the judge around its batches (envaudit.harness.witness): the
    judge's clock brackets each batch, a fresh input is drawn before each step (outside the
    device's clock), a returned output is kept in the step's slot after it. This base does
    nothing: benchmarks and tests that time a launch without a judge."""

    def open(self, first: int, steps: int) -> None:
        """A batch of `steps` steps, numbered from `first`, is about to run."""

    def prime(self, step: int) -> None:
        """Before step `step` (before its flush): its fresh inputs."""

    def flushed(self, step: int) -> None:
        """Between step `step`'s flush and its start event: a graph's fresh rows, which its
        calls then find in L2 as they found the rotating copies they replace."""

    def keep(self, step: int, result: Any) -> None:
        """After step `step`'s end event: keep what it returned where the judge can read it."""

    def close(self, samples_ms: list[float]) -> None:
        """The batch is done and synchronised; the time of each of its steps."""

    def batch_cap(self) -> int:
        """The most steps one batch may hold (the slots the judge can read)."""
        return MAX_ITERS

    def graph_call_cap(self) -> int:
        """The most calls one graph may hold (each call's fresh input is a row of its own)."""
        return MAX_GRAPH_CALLS

    def capturing(self, calls: int) -> None:
        """Graphs of `calls` calls each are about to be captured."""

    def capture(self, graph: int, call: int) -> None:
        """Call `call` of graph `graph` is about to be captured."""

    def captured(self, graph: int, call: int, result: Any) -> None:
        """What that captured call returned (its outputs on every replay)."""

    def graphs_ready(self, graphs: int, calls: int) -> None:
        """The graphs the measurement will replay: `graphs` of `calls` calls each."""


NO_WINDOW = Window()


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
    stop: str | None = None
    """Why measuring stopped: precise (the median's interval reached PRECISION), time_budget
    (TARGET_MEASURE_MS measured) or iteration_cap (MAX_ITERS)."""
    median_halfwidth: float | None = None
    """Half-width of the median's 95% confidence interval, relative to the median."""
    sm_clock_mhz: int | None = None
    """The SM clock when the warm-up ended (NVML), None when NVML cannot read it."""
    clock_steady: bool | None = None
    """Whether the warm-up saw the clock settle before WARMUP_MAX_MS (None: no NVML)."""
    sm_clock_range_mhz: list[int] | None = None
    """Lowest and highest SM clock read around the measured batches (None: no NVML)."""
    power_limited: bool | None = None
    """Whether NVML found the clock held down by a power or thermal limit at some read around
    the measured batches (None: no NVML); such a measurement never stops early."""
    warmup_power_w: float | None = None
    """The board power NVML last refreshed during the warm-up, W (None: none came, or NVML
    cannot read it); the warm-up waits for one (POWER_SAMPLE_AFTER_MS)."""
    budget_ms: float | None = None
    """The measured time this measurement could spend (TARGET_MEASURE_MS, CPU_TARGET_MEASURE_MS,
    or what the audit asked for: --measure-ms)."""

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


def median_interval(samples: list[float]) -> tuple[float, float]:
    """Distribution-free 95% confidence interval of the median: the order statistics
    n/2 -/+ 0.98 sqrt(n) places from the middle (0-based, symmetric about it)."""
    ordered = sorted(samples)
    n = len(ordered)
    reach = 0.98 * math.sqrt(n)
    lo = max(0, math.floor(n / 2 - reach))
    hi = min(n - 1, math.ceil(n / 2 + reach) - 1)
    return ordered[lo], ordered[hi]


def median_halfwidth(samples: list[float]) -> float:
    """Half the width of `median_interval`, relative to the median."""
    lo, hi = median_interval(samples)
    median = statistics.median(samples)
    return (hi - lo) / 2 / median if median > 0 else math.inf


def flush_bytes(device: torch.device) -> int:
    """The L2 flush's size: twice the L2 cache, at least L2_FLUSH_MIN_BYTES."""
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0))
    return max(2 * l2, L2_FLUSH_MIN_BYTES)


def flush_buffer(device: torch.device) -> torch.Tensor:
    return torch.empty(flush_bytes(device), dtype=torch.uint8, device=device)


@dataclass
class Warmup:
    iterations: int
    estimate_ms: float
    sm_clock_mhz: int | None
    clock_steady: bool | None
    power_w: float | None = None
    """The last power figure NVML refreshed during the warm-up (None: none, or not read)."""


def clock_settled(
    readings: list[int], half: int = CLOCK_HALF_READS, tolerance: float = CLOCK_TREND_TOLERANCE
) -> bool:
    """Whether the clock has stopped moving: the mean of the last `half` readings is within
    `tolerance` of the mean of the `half` before them."""
    if len(readings) < 2 * half:
        return False
    recent = statistics.fmean(readings[-half:])
    before = statistics.fmean(readings[-2 * half : -half])
    return abs(recent - before) <= tolerance * before


def power_heated(fresh_w: list[float], limit_w: float, limited: bool) -> bool:
    """Whether a kernel has run long enough for the board's power controller to have had its
    say, given the power figures NVML refreshed while it ran (`fresh_w`): one figure below
    POWER_BOUND_SHARE of the limit (a kernel that cannot reach the limit), or a limit reported
    (the clock is held down: the measurement then lasts the wander window), or two figures at
    the limit without one (the controller let it be). Until then a kernel that will be held
    down runs at its boost clock: FA4's dense attention read 0.179-0.181 ms per call for the
    first 60-80 ms from idle and 0.186-0.191 ms from then on (s58)."""
    if limited:
        return True
    if not fresh_w:
        return False
    return fresh_w[0] < POWER_BOUND_SHARE * limit_w or len(fresh_w) >= 2


def _heated(clock: SmClock | None, began: float, limited_before: int) -> bool:
    if clock is None or not clock.reads_power or clock.power_limit_w is None:
        return True
    fresh = clock.power_after(began + POWER_SAMPLE_AFTER_MS / 1e3)
    return power_heated(fresh, clock.power_limit_w, clock.limited_reads > limited_before)


def _cuda_warmup(launch: Launch, copies: int, clock: SmClock | None = None) -> Warmup:
    """Warm up (module docstring); the per-call estimate comes from the second half."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: list[float] = []
    began = time.perf_counter()
    readings = _read(clock, [])  # a power figure that changed before now is not this kernel's
    limited = clock.limited_reads if clock is not None else 0
    elapsed = since_read = 0.0
    while True:
        start.record()
        launch(len(times) % copies)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
        elapsed += times[-1]
        since_read += times[-1]
        if readings and since_read >= CLOCK_READ_EVERY_MS:
            since_read = 0.0
            readings = _read(clock, readings)
        enough = len(times) >= WARMUP_MIN_ITERS and elapsed >= WARMUP_MIN_MS
        if enough and (not readings or clock_settled(readings)) and _heated(clock, began, limited):
            break
        if len(times) >= MAX_ITERS or _ms_since(began) >= WARMUP_MAX_MS:
            break
    tail = times[len(times) // 2 :]
    steady = clock_settled(readings) if readings else None
    fresh = clock.power_after(began + POWER_SAMPLE_AFTER_MS / 1e3) if clock is not None else []
    return Warmup(
        len(times),
        sum(tail) / len(tail),
        readings[-1] if readings else None,
        steady,
        fresh[-1] if fresh else None,
    )


def _event_loop(
    step: Launch,
    n: int,
    copies: int,
    flush: torch.Tensor,
    first: int = 0,
    window: Window = NO_WINDOW,
) -> list[float]:
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    window.open(first, n)
    for i in range(n):
        window.prime(first + i)
        flush.zero_()
        window.flushed(first + i)
        starts[i].record()
        result = step((first + i) % copies)
        ends[i].record()
        window.keep(first + i, result)
    torch.cuda.synchronize()
    times = [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]
    window.close(times)
    return times


class Measured(NamedTuple):
    samples: list[float]
    """Per-call times, ms."""
    stop: str
    width: float
    """The median's relative half-width."""
    clocks: list[int]
    """The SM clock read around every batch (MHz)."""
    limited: bool
    """NVML reported a power or thermal limit at some read."""


def _measure(
    step: Launch,
    copies: int,
    flush: torch.Tensor,
    estimate_ms: float,
    scale: int = 1,
    clock: SmClock | None = None,
    budget_ms: float = TARGET_MEASURE_MS,
    wander_ms: float = WANDER_MIN_MEASURE_MS,
    window: Window = NO_WINDOW,
) -> Measured:
    """Batches until the median is PRECISION-tight, and at least `wander_ms` measured if the
    clock moved or was limited, or until the budget is spent (module docstring); (per-call
    samples, why it stopped, the median's relative half-width, the SM clock read around every
    batch). `scale` is the number of calls one step makes (graph replays)."""
    samples: list[float] = []
    limited_before = clock.limited_reads if clock is not None else 0
    readings = _read(clock, [])
    batch = _iterations(estimate_ms, MIN_MEASURE_MS, MIN_ITERS, MAX_ITERS)
    while True:
        batch = min(batch, window.batch_cap())
        raw = _event_loop(step, batch, copies, flush, len(samples), window)
        samples += [t / scale for t in raw]
        readings = _read(clock, readings)
        width = median_halfwidth(samples)
        limited = clock is not None and clock.limited_reads > limited_before
        progress = Progress(
            len(samples), sum(samples) * scale, width, limited or not _clock_held(readings)
        )
        stop = stop_reason(progress, budget_ms, wander_ms)
        if stop is not None:
            return Measured(samples, stop, width, readings, limited)
        batch = next_batch(progress, budget_ms, wander_ms)


class Progress(NamedTuple):
    """Where a measurement stands after a batch."""

    steps: int
    spent_ms: float
    """Measured time so far."""
    width: float
    """The median's relative half-width."""
    wandering: bool
    """The SM clock moved beyond CLOCK_HOLD_TOLERANCE, or NVML reported a limit."""


def stop_reason(
    p: Progress, budget_ms: float = TARGET_MEASURE_MS, wander_ms: float = WANDER_MIN_MEASURE_MS
) -> str | None:
    """Why measuring stops now (module docstring), or None to go on. A measurement that spent
    the budget says so even when its median is tight by then."""
    if p.spent_ms >= budget_ms:
        return "time_budget"
    if p.width <= PRECISION and (not p.wandering or p.spent_ms >= wander_ms):
        return "precise"
    if p.steps >= MAX_ITERS:
        return "iteration_cap"
    return None


def next_batch(
    p: Progress, budget_ms: float = TARGET_MEASURE_MS, wander_ms: float = WANDER_MIN_MEASURE_MS
) -> int:
    """Steps in the next batch: as many as measured so far (doubling), no more than the budget
    and MAX_ITERS leave, and while the clock wanders no more than it takes to pass `wander_ms`,
    so a tight median is checked again just after the window closes."""
    left = budget_ms - p.spent_ms
    if p.wandering and p.spent_ms < wander_ms:
        left = min(left, wander_ms - p.spent_ms)
    per_step = max(p.spent_ms / p.steps, 1e-6)
    return max(1, min(p.steps, MAX_ITERS - p.steps, int(left / per_step) + 1))


def _read(clock: SmClock | None, readings: list[int]) -> list[int]:
    reading = clock.read() if clock is not None else None
    return readings if reading is None else [*readings, reading]


def _clock_held(readings: list[int]) -> bool:
    """The SM clock stayed within CLOCK_HOLD_TOLERANCE over the whole measurement (or cannot be
    read). A power-limited kernel's clock swings by 10% and more over hundreds of milliseconds
    (1470-1770 MHz for a BF16 GEMM on the H200), and can hold within 1% for the few tens of
    milliseconds a short measurement lasts while being several percent off the next one's: so
    a measurement during which NVML reports a power or thermal limit counts as wandering too,
    and lasts at least WANDER_MIN_MEASURE_MS (_measure)."""
    return not readings or max(readings) <= min(readings) * (1 + CLOCK_HOLD_TOLERANCE)


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def _finish(
    stats: TimingStats,
    warm: Warmup,
    warmup_wall: float,
    measured: float,
    outcome: Measured,
    budget_ms: float,
) -> TimingStats:
    clocks = outcome.clocks
    stats.budget_ms = budget_ms
    stats.warmup_wall_ms, stats.measure_wall_ms = warmup_wall, measured
    stats.stop, stats.median_halfwidth = outcome.stop, outcome.width
    stats.sm_clock_mhz, stats.clock_steady = warm.sm_clock_mhz, warm.clock_steady
    stats.warmup_power_w = warm.power_w
    stats.sm_clock_range_mhz = [min(clocks), max(clocks)] if clocks else None
    stats.power_limited = outcome.limited if clocks else None
    return stats


def time_eager_cuda(
    launch: Launch,
    copies: int,
    device: torch.device,
    clock: SmClock | None = None,
    budget_ms: float = TARGET_MEASURE_MS,
    wander_ms: float = WANDER_MIN_MEASURE_MS,
    window: Window = NO_WINDOW,
) -> TimingStats:
    flush = flush_buffer(device)
    started = time.perf_counter()
    warm = _cuda_warmup(launch, copies, clock)
    warmup_wall = _ms_since(started)
    started = time.perf_counter()
    measured = _measure(
        launch, copies, flush, warm.estimate_ms, 1, clock, budget_ms, wander_ms, window
    )
    stats = summarize(measured.samples, "cuda_events", warm.iterations, copies, flush.numel())
    return _finish(stats, warm, warmup_wall, _ms_since(started), measured, budget_ms)


def graph_calls(per_call_ms: float) -> int:
    """Calls per graph for a kernel of this per-call time: GRAPH_CALLS_TARGET_US of them, at
    least one, at most MAX_GRAPH_CALLS."""
    if per_call_ms <= 0:
        return MAX_GRAPH_CALLS
    return max(1, min(MAX_GRAPH_CALLS, int(GRAPH_CALLS_TARGET_US / 1e3 / per_call_ms)))


GRAPH_RESIZE_FACTOR = 1.5
"""Capture again when a replay's own per-call time asks for this many times the calls the
estimate gave: the eager estimate of a launch-bound kernel carries its launch latency (a ~5 us
copy estimated at 9-14 us on the H200, which left its graph at 140 calls and its figure at
1.087x CUPTI where 256 calls read 1.073x)."""


def graph_count(copies: int, calls: int) -> int:
    """Graphs to capture: enough for the replays to take turns over the input copies (up to
    MAX_GRAPHS), and one where a graph's own calls already go round every copy: more would
    only cost their capture (a 256-call graph of a Triton kernel takes tens of milliseconds to
    capture from Python) and the upload replay of each."""
    return 1 if calls >= copies else min(copies, MAX_GRAPHS)


def _capture(
    launch: Launch, copies: int, calls: int, device: torch.device, window: Window = NO_WINDOW
) -> list[Any]:
    """graph_count graphs of `calls` back-to-back calls each, on rotating input copies."""
    try:
        window.capturing(calls)
        graphs = []
        for g in range(graph_count(copies, calls)):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for j in range(calls):
                    window.capture(g, j)
                    window.captured(g, j, launch((g + j) % copies))
            graphs.append(graph)
        torch.cuda.synchronize(device)
        return graphs
    except Exception as exc:
        torch.cuda.synchronize(device)
        raise GraphCaptureError(f"{type(exc).__name__}: {exc}") from exc


def time_graph_cuda(
    launch: Launch,
    copies: int,
    device: torch.device,
    clock: SmClock | None = None,
    estimate_ms: float | None = None,
    budget_ms: float = TARGET_MEASURE_MS,
    wander_ms: float = WANDER_MIN_MEASURE_MS,
    window: Window = NO_WINDOW,
    calls: int | None = None,
) -> TimingStats:
    """Capture graphs of back-to-back calls and time their replays (see module docstring).
    `estimate_ms` (the eager median, when known) sizes the graph without a warm-up of its own;
    when the replays show the calls to be much shorter than that, the graphs are captured once
    more at the size their own time asks for (GRAPH_RESIZE_FACTOR). `calls`, where given, is
    the graph's size (within the window's cap), never resized: a chained graph holds as many
    calls as the graph it bounds. `budget_ms` and `wander_ms` are the stopping rule's
    TARGET_MEASURE_MS and WANDER_MIN_MEASURE_MS (benchmarks compare other values side by
    side)."""
    started = time.perf_counter()
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    try:
        with torch.cuda.stream(side):
            for i in range(copies):
                launch(i)
        torch.cuda.current_stream(device).wait_stream(side)
        if estimate_ms is None:
            estimate_ms = _cuda_warmup(launch, copies).estimate_ms
    except Exception as exc:
        torch.cuda.synchronize(device)
        raise GraphCaptureError(f"{type(exc).__name__}: {exc}") from exc
    cap = window.graph_call_cap()
    fixed = calls is not None
    calls = min(calls if calls is not None else graph_calls(estimate_ms), cap)
    graphs = _capture(launch, copies, calls, device, window)

    def replay(i: int) -> None:
        graphs[i].replay()

    warm = _cuda_warmup(replay, len(graphs), clock)
    wanted = min(graph_calls(warm.estimate_ms / calls), cap)
    if not fixed and wanted >= GRAPH_RESIZE_FACTOR * calls:
        graphs.clear()  # the old graphs' memory goes back before the new ones are captured
        graphs.extend(_capture(launch, copies, wanted, device, window))
        for i in range(len(graphs)):  # a graph's first replay uploads it
            replay(i)
        torch.cuda.synchronize(device)
        # the clock has settled on the same calls: the estimate scales with the graph
        warm.estimate_ms *= wanted / calls
        calls = wanted
    flush = flush_buffer(device)
    window.graphs_ready(len(graphs), calls)
    warmup_wall = _ms_since(started)
    started = time.perf_counter()
    measured = _measure(
        replay, len(graphs), flush, warm.estimate_ms, calls, clock, budget_ms, wander_ms, window
    )
    stats = summarize(measured.samples, "cuda_graph", warm.iterations, copies, flush.numel(), calls)
    return _finish(stats, warm, warmup_wall, _ms_since(started), measured, budget_ms)


def time_wall_clock(
    launch: Launch,
    copies: int,
    budget_ms: float = CPU_TARGET_MEASURE_MS,
    window: Window = NO_WINDOW,
) -> TimingStats:
    warmup = 0
    t0 = time.perf_counter()
    while warmup < 1 or (warmup < WARMUP_MIN_ITERS and time.perf_counter() - t0 < 0.05):
        launch(warmup % copies)
        warmup += 1
    estimate = (time.perf_counter() - t0) * 1e3 / warmup
    n = _iterations(estimate, budget_ms, CPU_MIN_ITERS, CPU_MAX_ITERS)
    warmup_wall = _ms_since(t0)
    samples: list[float] = []
    started = time.perf_counter()
    while len(samples) < n:
        first, batch = len(samples), min(n - len(samples), window.batch_cap())
        window.open(first, batch)
        timed: list[float] = []
        for i in range(first, first + batch):
            window.prime(i)
            start = time.perf_counter()
            result = launch(i % copies)
            timed.append((time.perf_counter() - start) * 1e3)
            window.keep(i, result)
        window.close(timed)
        samples += timed
    stats = summarize(samples, "wall_clock", warmup, copies, 0)
    stats.warmup_wall_ms, stats.measure_wall_ms = warmup_wall, _ms_since(started)
    stats.budget_ms = budget_ms
    return stats
