"""95% intervals on speedups, from what each result line keeps of its timing.

A speedup is baseline median / solution median. Each median is uncertain twice over:
- within its run: the harness keeps each timing's median, interquartile range and sample count;
  the standard error of a sample median is sqrt(pi/2) * sigma / sqrt(n), with sigma estimated as
  IQR / 1.349 (both exact for normal samples; a robust estimate otherwise);
- between runs: the same solution timed again later, in a fresh process, moves by more than
  that, by how much depends on the kind of figure and on whether the two runs shared a card
  (`noise_of`). Over the repeated lines of the committed report (docs/report/results.jsonl:
  the same solution, workload, env and GPU model; `python benchmarks/run_to_run.py
  docs/report/results.jsonl` prints the table; the CPU row is from the four smoke runs in
  docs/results/cpu/timing-integrity/), the standard deviation of log medians was:

  | figure | same card: groups, median, p90 | across cards: groups, median, p90 |
  |---|---|---|
  | CUDA graph replays | 18, 0.4%, 1.6% | 83, 0.8%, 6.3% |
  | eager, within 1.15x of the line's graph figure | 15, 0.3%, 1.3% | 50, 0.5%, 1.6% |
  | eager, above 1.15x its graph figure (host-bound) | 3, 40%, 45% | 33, 32%, 62% |
  | eager, no graph figure | - | 13, 26%, 37% |
  | CPU wall clock (a shared 2-core machine) | 21, 2.9%, 17% | - |

  The 90th percentiles are the floors added to every line (RUN_TO_RUN_SD for two runs on one
  card, CARD_TO_CARD_SD for runs on two cards of a model). A host-bound eager figure (the GPU
  waited on Python between kernels) or an eager figure with no graph figure to tell moved by a
  third between runs and runtimes: its floor is as wide as that, and the speedup says why
  (`Noise.caveat`) rather than print a tight bracket.
- repeated runs, where a report holds several lines of one group: their own scatter, when it
  is wider than the floor (`observed_log_variance`).

So per line var(log median) = (within-run SE / median)^2 + max(floor^2, observed variance); a
speedup's interval is exp(log speedup +- 1.96 sqrt(var_solution + var_baseline)), and a
geometric mean over n workloads has variance sum(var_i) / n^2 (workloads taken as
independent). "Within noise" means the interval holds 1.0. A speedup divides the graph figure
of each side where it has one, else its eager figure, and names the modes it divides.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from envaudit.schema.result_line import Mode, ResultLine, TimingStats
from envaudit.schema.summary import Figure, Ratio

RUN_TO_RUN_SD = {
    "cuda_graph": 0.016,
    "cuda_events": 0.016,
    "flashinfer-bench": 0.016,
    "host-bound": 0.45,
    "eager only": 0.37,
    "wall_clock": 0.17,
}
"""Per kind of figure, the floor between two runs on one card, or one machine for the CPU's
wall clock (module docstring). A FlashInfer-Bench trace keeps one latency (envaudit's exports
write the graph median there): it counts as a graph figure."""
CARD_TO_CARD_SD = {
    **RUN_TO_RUN_SD,
    "cuda_graph": 0.063,
    "flashinfer-bench": 0.063,
    "host-bound": 0.62,
}
"""The same between runs on two cards of one GPU model, or on cards a line does not name (a
trace names only the GPU's model)."""
HOST_BOUND_RATIO = 1.15
"""An eager figure more than this times the line's graph figure was set by the host."""
Z95 = 1.959964
SIGMA_PER_IQR = 1 / 1.349
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


@dataclass(frozen=True)
class Noise:
    """What is known of one figure's run-to-run scatter: its kind, its floor (standard
    deviation of log medians) and, for a figure the host set, what a reader must know."""

    kind: str
    floor: float
    caveat: str | None = None


def noise_of(line: ResultLine, mode: Mode, same_card: bool = True) -> Noise | None:
    """The kind of figure a line's `mode` timing is, and its floor against a run on the same
    card or (`same_card` false) on another card of the model; None without a median."""
    floors = RUN_TO_RUN_SD if same_card else CARD_TO_CARD_SD
    stats = line.stats(mode)
    median = stats.positive_median() if stats is not None else None
    if stats is None or median is None:
        return None
    timer = stats.mode or ("cuda_graph" if mode == "graph" else "cuda_events")
    if timer != "cuda_events":
        return Noise(timer, floors.get(timer, floors["wall_clock"]))
    graph = line.stats("graph")
    graph_ms = graph.positive_median() if graph is not None else None
    if graph_ms is None:
        return Noise(
            "eager only",
            floors["eager only"],
            "eager only: no graph figure tells whether the host set it, and such figures"
            " moved 26% (median) between runs",
        )
    if median > HOST_BOUND_RATIO * graph_ms:
        return Noise(
            "host-bound",
            floors["host-bound"],
            f"eager, host-bound ({median / graph_ms:.1f}x its graph figure): such figures moved"
            " 33% (median) between runs; not comparable across runs or runtimes",
        )
    return Noise("cuda_events", floors["cuda_events"])


def observed_log_variance(medians: Sequence[float]) -> float | None:
    """The sample variance of log medians of repeated runs of one group (None below two)."""
    logs = [math.log(m) for m in medians if m > 0]
    return statistics.variance(logs) if len(logs) > 1 else None


def observed_of(line: ResultLine, runs: Iterable[ResultLine]) -> float | None:
    """The scatter of `runs` (the repeated runs of `line`'s group, `line` among them) in the
    figure `line` is compared by: the variance of their PASSED log medians (None below two)."""
    mode = figure_mode(line)
    if mode is None:
        return None
    return observed_log_variance([m for run in runs if run.passed and (m := run.median(mode))])


def log_median_variance(
    timing: TimingStats | None, floor: float | None = None, observed: float | None = None
) -> float | None:
    """var(log median) of one timing mode of one line; None when it has no median. The floor is
    `noise_of(...).floor` where the line is known; without one, that of the timing's own kind
    (its timer: graph replays, events, a wall clock). `observed`: the variance of log medians
    of repeated runs of the same group, which counts where it is wider than the floor."""
    if timing is None:
        return None
    if timing.median_ms is None or timing.median_ms <= 0:
        return None
    if floor is None:
        floor = RUN_TO_RUN_SD.get(timing.mode or "cuda_events", RUN_TO_RUN_SD["wall_clock"])
    return _within_log_variance(timing) + max(floor**2, observed or 0.0)


def _within_log_variance(timing: TimingStats) -> float:
    """(Within-run standard error of the median / the median)^2, from the quartiles; 0.0
    without them."""
    median, iqr, samples = timing.median_ms, timing.iqr_ms, timing.iterations
    if median is None or median <= 0 or iqr is None or samples is None or samples <= 1:
        return 0.0
    within = MEDIAN_SE_FACTOR * iqr * SIGMA_PER_IQR / math.sqrt(samples) / median
    return within**2


def interval(log_value: float, variance: float) -> tuple[float, float]:
    half = Z95 * math.sqrt(variance)
    return math.exp(log_value - half), math.exp(log_value + half)


def speedup_interval(
    speedup: float | None, mine: TimingStats | None, theirs: TimingStats | None
) -> tuple[tuple[float, float], float] | None:
    """(95% interval, variance of log speedup) for baseline/solution timings of one mode."""
    if not speedup or speedup <= 0:
        return None
    variances = (log_median_variance(mine), log_median_variance(theirs))
    if variances[0] is None or variances[1] is None:
        return None
    variance = variances[0] + variances[1]
    return interval(math.log(speedup), variance), variance


def geomean_interval(
    speedups: Sequence[float], variances: Sequence[float]
) -> tuple[float, float] | None:
    """The 95% interval of the geometric mean of speedups with these log variances."""
    if not speedups or len(speedups) != len(variances):
        return None
    mean = sum(math.log(s) for s in speedups) / len(speedups)
    return interval(mean, geomean_log_variance(variances))


def geomean_log_variance(variances: Sequence[float]) -> float:
    """var(log geometric mean) of independent terms: sum(var_i) / n^2."""
    return sum(variances) / len(variances) ** 2


def holds_one(bounds: Sequence[float] | None) -> bool | None:
    """Within noise: the interval contains 1.0 (None without an interval)."""
    if not bounds:
        return None
    return bounds[0] <= 1.0 <= bounds[1]


def figure_mode(line: ResultLine) -> Mode | None:
    """The figure a line is compared by: its graph figure where it has one, else its eager one
    (None when it has neither)."""
    modes: tuple[Mode, ...] = ("graph", "eager")
    for mode in modes:
        stats = line.stats(mode)
        if stats is not None and stats.positive_median() is not None:
            return mode
    return None


def figure_ms(line: ResultLine) -> float | None:
    """The median of the figure a line is compared by (`figure_mode`)."""
    mode = figure_mode(line)
    return line.median(mode) if mode is not None else None


@dataclass(frozen=True)
class Speedup:
    """One line against another (a baseline, or the same solution before): base / line, by
    each line's own figure (`figure_mode`), with its interval and the caveats of its figures."""

    base_mode: Mode
    mode: Mode
    base_ms: float
    line_ms: float
    ci95: tuple[float, float]
    log_variance: float
    caveats: tuple[str, ...] = ()

    @property
    def value(self) -> float:
        return self.base_ms / self.line_ms

    @property
    def modes(self) -> str:
        """The two figures divided, base's first: "graph/graph", "eager/graph", ..."""
        return f"{self.base_mode}/{self.mode}"

    @property
    def within_noise(self) -> bool:
        return self.ci95[0] <= 1.0 <= self.ci95[1]

    def inverse(self) -> Speedup:
        """line / base: the same comparison read the other way (a time ratio)."""
        low, high = self.ci95
        return Speedup(
            self.mode,
            self.base_mode,
            self.line_ms,
            self.base_ms,
            (1 / high, 1 / low),
            self.log_variance,
            self.caveats,
        )


def figure_of(line: ResultLine, observed: float | None = None) -> Figure | None:
    """The figure `line` is compared by (`figure_mode`), with its within-run uncertainty, its
    kind of figure (which sets its floor) and `observed`, the variance of log medians of the
    repeated runs of its group where a report has them; None without a timing."""
    mode = figure_mode(line)
    if mode is None:
        return None
    stats, noise = line.stats(mode), noise_of(line, mode)
    if stats is None or noise is None or stats.median_ms is None:
        return None
    return Figure(
        mode=mode,
        median_ms=float(stats.median_ms),
        kind=noise.kind,
        within_log_variance=_within_log_variance(stats),
        observed_log_variance=observed,
        caveat=noise.caveat,
        gpu_uuid=line.environment.gpu_uuid,
    )


def floor_of(kind: str, same_card: bool) -> float:
    """The run-to-run floor of a kind of figure (`noise_of`), on one card or across cards."""
    floors = RUN_TO_RUN_SD if same_card else CARD_TO_CARD_SD
    return floors.get(kind, floors["wall_clock"])


def ratio_of(
    line: Figure, base: Figure, names: tuple[str, str] = ("this line", "baseline")
) -> Speedup:
    """The one comparison rule on two figures: base / line, each figure's variance its
    within-run part plus the wider of its floor (same card or across cards) and its group's
    observed scatter, the caveats of both (base's first)."""
    same_card = line.gpu_uuid is not None and line.gpu_uuid == base.gpu_uuid
    variances = [
        figure.within_log_variance
        + max(floor_of(figure.kind, same_card) ** 2, figure.observed_log_variance or 0.0)
        for figure in (line, base)
    ]
    variance = variances[0] + variances[1]
    caveats = tuple(
        f"{name}: {figure.caveat}"
        for name, figure in ((names[1], base), (names[0], line))
        if figure.caveat
    )
    bounds = interval(math.log(base.median_ms / line.median_ms), variance)
    return Speedup(base.mode, line.mode, base.median_ms, line.median_ms, bounds, variance, caveats)


def speedup_of(
    line: ResultLine,
    base: ResultLine,
    observed: tuple[float | None, float | None] = (None, None),
    names: tuple[str, str] = ("this line", "baseline"),
) -> Speedup | None:
    """The one comparison rule (module docstring). `observed`: the variance of log medians of
    repeated runs of each line's group (line's, base's), where a report has them."""
    mine, theirs = figure_of(line, observed[0]), figure_of(base, observed[1])
    if mine is None or theirs is None:
        return None
    return ratio_of(mine, theirs, names)


def geomean_of(speedups: Sequence[Speedup]) -> Ratio | None:
    """The geometric mean of speedups (workloads taken as independent) with its 95% interval;
    None without any. The same speedups in any order give the same bits."""
    return geomean_ratio([s.value for s in speedups], [s.log_variance for s in speedups])


def geomean_ratio(values: Sequence[float], variances: Sequence[float]) -> Ratio | None:
    """The geometric mean of ratios with these log variances, and its 95% interval (exact
    sums, so the same ratios in any order give the same bits); None without any."""
    if not values or len(values) != len(variances):
        return None
    mean = math.fsum(math.log(v) for v in values) / len(values)
    bounds = interval(mean, math.fsum(variances) / len(variances) ** 2)
    return Ratio(value=math.exp(mean), ci95=list(bounds), within_noise=holds_one(bounds))
