"""The stopping rule's statistics on the CPU (known answers), and on a GPU the rule itself: a
steady kernel stops early with a tight median, a noisy one spends the budget."""

from __future__ import annotations

import random
import statistics

import pytest
import torch

from envaudit.harness import timing
from envaudit.harness.environment import SmClock


def test_median_halfwidth_uses_the_order_statistics_around_the_median() -> None:
    samples = [float(v) for v in range(1, 101)]  # n = 100: places 40 and 59 (0-based)
    assert timing.median_interval(samples) == (41.0, 60.0)
    assert timing.median_halfwidth(samples) == pytest.approx((60 - 41) / 2 / 50.5)
    assert timing.median_halfwidth([5.0] * 20) == 0.0


def test_the_median_interval_covers_the_true_median_about_95_percent() -> None:
    """Over 2000 samples of 40 draws from a skewed distribution (true median ln 2 for the unit
    exponential), the interval holds the true median 93-99% of the time (order-statistic
    intervals are slightly conservative at this n)."""
    rng = random.Random(5)
    true_median = 0.6931471805599453
    hits = 0
    for _ in range(2000):
        draws = [rng.expovariate(1.0) for _ in range(40)]
        lo, hi = timing.median_interval(draws)
        assert (lo, hi) == (sorted(draws)[13], sorted(draws)[26])
        half = timing.median_halfwidth(draws) * statistics.median(draws)
        assert half == pytest.approx((hi - lo) / 2)
        hits += lo <= true_median <= hi
    assert 0.93 <= hits / 2000 <= 0.99


def test_clock_settled_compares_the_trend_not_single_readings() -> None:
    half = timing.CLOCK_HALF_READS
    assert not timing.clock_settled([1980] * (2 * half - 1))
    assert timing.clock_settled([345] + [1980] * 2 * half)
    # boosting up from idle, or sinking to the power limit: still moving
    assert not timing.clock_settled([345] * half + [1980] * half)
    assert not timing.clock_settled([1980] * half + [1830] * half)
    # dithering by a few percent around a power-limited level: settled
    assert timing.clock_settled([1470, 1545, 1485, 1530, 1470, 1515][-2 * half :])


def test_the_warm_up_waits_for_the_power_controller_only_where_it_will_act() -> None:
    """The H200's FA4 attention from idle (s58): NVML's first figure after the kernel began
    read 752-789 W against a 700 W limit, the clock still 1980 MHz; the next one the cap."""
    limit = 700.0
    assert not timing.power_heated([], limit, limited=False)  # no figure of its own yet
    assert timing.power_heated([350.0], limit, limited=False)  # far from the limit
    assert not timing.power_heated([789.0], limit, limited=False)  # at it, not yet cut
    assert not timing.power_heated([0.9 * limit], limit, limited=False)
    assert timing.power_heated([789.0, 709.0], limit, limited=False)  # two refreshes, no cap
    assert timing.power_heated([789.0], limit, limited=True)  # cut: the wander rule takes over
    assert timing.power_heated([], limit, limited=True)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.gpu
@gpu
def test_a_steady_kernel_stops_early_with_a_tight_median() -> None:
    device = torch.device("cuda")
    src = torch.randn(64 << 20, device=device)
    dst = torch.empty_like(src)
    stats = timing.time_eager_cuda(
        lambda i: torch.mul(src, 1.0, out=dst), 1, device, SmClock(device)
    )
    assert stats.stop == "precise" and stats.median_halfwidth is not None
    assert stats.median_halfwidth <= timing.PRECISION
    assert stats.iterations < timing.MAX_ITERS
    assert stats.measure_wall_ms is not None and stats.measure_wall_ms < timing.TARGET_MEASURE_MS
    graph = timing.time_graph_cuda(
        lambda i: torch.mul(src, 1.0, out=dst), 1, device, None, stats.median_ms
    )
    assert graph.stop == "precise"
    assert graph.median_ms == pytest.approx(stats.median_ms, rel=0.05)


def test_graphs_hold_the_target_time_of_calls_within_bounds() -> None:
    target_ms = timing.GRAPH_CALLS_TARGET_US / 1e3
    assert timing.graph_calls(target_ms / 100) == 100
    assert timing.graph_calls(target_ms * 3) == 1
    assert timing.graph_calls(1e-5) == timing.MAX_GRAPH_CALLS
    assert timing.graph_calls(0.0) == timing.MAX_GRAPH_CALLS


def test_one_graph_where_its_calls_go_round_every_copy() -> None:
    assert timing.graph_count(copies=8, calls=256) == 1
    assert timing.graph_count(copies=8, calls=8) == 1
    assert timing.graph_count(copies=8, calls=7) == timing.MAX_GRAPHS
    assert timing.graph_count(copies=2, calls=1) == 2
    assert timing.graph_count(copies=1, calls=1) == 1


@pytest.mark.gpu
@gpu
def test_the_replays_read_every_input_copy() -> None:
    """Whether one graph holds every copy or several graphs take turns, the replays go through
    every copy (each copy is also called once before capture, so a copy no replay reads stays
    at 1): a ~5 us kernel gets one graph of many calls, a ~2.5 ms one a graph per copy."""
    device = torch.device("cuda")
    for copies, sleep_cycles, estimate_ms in ((8, 0, 0.01), (3, 5_000_000, 2.5)):
        reads = torch.zeros(copies, dtype=torch.int64, device=device)

        def launch(i: int, reads: torch.Tensor = reads, cycles: int = sleep_cycles) -> None:
            if cycles:
                torch.cuda._sleep(cycles)
            reads[i] += 1

        stats = timing.time_graph_cuda(launch, copies, device, None, estimate_ms=estimate_ms)
        assert bool((reads >= 2).all()), (copies, stats.calls_per_sample, reads.tolist())


@pytest.mark.gpu
@gpu
def test_a_launch_bound_estimate_does_not_leave_the_graph_short() -> None:
    """A ~5 us copy whose eager estimate carried launch latency (14 us) still gets the graph
    its replays ask for (it would hold 142 calls by the estimate)."""
    device = torch.device("cuda")
    srcs = [torch.randn(2 << 20, device=device) for _ in range(8)]
    dsts = [torch.empty_like(s) for s in srcs]
    stats = timing.time_graph_cuda(
        lambda i: torch.mul(srcs[i], 1.0, out=dsts[i]), 8, device, None, estimate_ms=0.014
    )
    assert timing.graph_calls(0.014) < stats.calls_per_sample == timing.MAX_GRAPH_CALLS
    assert stats.median_ms < 0.0075


@pytest.mark.gpu
@gpu
def test_a_noisy_kernel_spends_the_budget() -> None:
    """Every other call sleeps 10x longer: the median's interval never tightens."""
    device = torch.device("cuda")
    calls = [0]

    def launch(i: int) -> None:
        calls[0] += 1
        torch.cuda._sleep(20_000 if calls[0] % 2 else 200_000)

    stats = timing.time_eager_cuda(launch, 1, device)
    assert stats.stop in ("time_budget", "iteration_cap")
    assert stats.median_halfwidth is not None and stats.median_halfwidth > timing.PRECISION


def test_a_measurement_stops_early_only_while_the_clock_holds() -> None:
    assert timing._clock_held([])  # no NVML: nothing to wait for
    assert timing._clock_held([1980, 1980, 1980])
    assert not timing._clock_held([1470, 1650, 1515])  # a GEMM at the power limit


def test_a_wandering_clock_makes_a_tight_median_wait_for_the_window() -> None:
    tight, loose = timing.PRECISION / 2, timing.PRECISION * 2
    budget, short = timing.TARGET_MEASURE_MS, 80.0
    steady = timing.Progress(20, 15.0, tight, wandering=False)
    assert timing.stop_reason(steady) == "precise"
    assert timing.stop_reason(steady._replace(wandering=True)) is None
    # the harness's window is the whole budget: a wandering clock spends it
    assert timing.stop_reason(timing.Progress(60, budget - 1, tight, True)) is None
    assert timing.stop_reason(timing.Progress(200, budget, tight, True)) == "time_budget"
    assert timing.stop_reason(timing.Progress(200, budget, loose, False)) == "time_budget"
    assert timing.stop_reason(timing.Progress(timing.MAX_ITERS, 50.0, loose, False)) == (
        "iteration_cap"
    )
    # a shorter window, as benchmarks/timing_fidelity.py compares it
    assert timing.stop_reason(timing.Progress(60, short, tight, True), wander_ms=short) == (
        "precise"
    )
    assert timing.stop_reason(timing.Progress(60, short - 1, tight, True), wander_ms=short) is None
    assert timing.stop_reason(timing.Progress(60, short, loose, True), wander_ms=short) is None


def test_batches_double_but_a_wandering_clock_stops_them_just_past_the_window() -> None:
    # 1 ms steps: 70 measured, a steady clock doubles to 70 more; with an 80 ms window a
    # wandering one asks for 11, so its tight median is checked again at 81 ms, not at 140
    assert timing.next_batch(timing.Progress(70, 70.0, 0.01, False)) == 70
    assert timing.next_batch(timing.Progress(70, 70.0, 0.01, True), wander_ms=80.0) == 11
    assert timing.next_batch(timing.Progress(90, 90.0, 0.01, True), wander_ms=80.0) == 90
    assert timing.next_batch(timing.Progress(250, 250.0, 0.01, True)) == 51  # budget: 300 ms
    assert timing.next_batch(timing.Progress(990, 99.0, 0.01, False)) == 10  # MAX_ITERS


@pytest.mark.gpu
@gpu
def test_a_power_limited_measurement_spends_the_budget() -> None:
    """A steady kernel stops as soon as its median is tight, unless NVML says a power or
    thermal limit holds the clock down: then the clock wanders between measurements, and the
    measurement lasts the whole budget (with a shorter `wander_ms`, that window).
    The clock here reports a limit at every read (the rule under test is the stopping one)."""

    class LimitedClock(SmClock):
        def read(self) -> int | None:
            self.limited_reads += 1
            return 1500

    device = torch.device("cuda")
    src = torch.randn(64 << 20, device=device)  # the steady kernel of the test above
    dst = torch.empty_like(src)

    def launch(i: int) -> None:
        torch.mul(src, 1.0, out=dst)

    stats = timing.time_eager_cuda(launch, 1, device, LimitedClock(device))
    assert stats.power_limited is True and stats.sm_clock_range_mhz == [1500, 1500]
    assert stats.stop in ("time_budget", "iteration_cap")
    short = timing.time_eager_cuda(launch, 1, device, LimitedClock(device), wander_ms=80.0)
    assert short.stop == "precise"
    assert 76.0 <= short.median_ms * short.iterations < 0.6 * timing.TARGET_MEASURE_MS
    free = timing.time_eager_cuda(launch, 1, device, None)
    assert free.stop == "precise" and free.power_limited is None


@pytest.mark.gpu
@gpu
def test_a_warm_up_ends_on_a_power_figure_of_its_own_kernel() -> None:
    """Where NVML reads the board's power, no warm-up ends before a figure taken while its own
    kernel ran has come."""
    device = torch.device("cuda")
    clock = SmClock(device)
    clock.read()  # the power figure is known from the first read on
    if not clock.reads_power or clock.power_limit_w is None:
        pytest.skip("NVML reads no instantaneous power here")
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn_like(a)
    stats = timing.time_eager_cuda(lambda i: torch.mm(a, b), 1, device, clock)
    assert stats.warmup_power_w is not None
    assert stats.warmup_wall_ms is not None and stats.warmup_wall_ms >= timing.POWER_SAMPLE_AFTER_MS
