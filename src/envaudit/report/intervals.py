"""95% intervals on speedups, from what each result line keeps of its timing.

A speedup is baseline median / solution median. Each median is uncertain twice over:
- within its run: the harness keeps each timing's median, interquartile range and sample count;
  the standard error of a sample median is sqrt(pi/2) * sigma / sqrt(n), with sigma estimated as
  IQR / 1.349 (both exact for normal samples; a robust estimate otherwise);
- between runs: the same solution timed again later, in a fresh process, on the same GPU, moves
  by more than that. Six alternated runs of the three FlashMLA solutions on an H200 (18 groups,
  docs/audit/README.md) gave standard deviations of log run medians of 0.2% to 1.9%, median 0.4%,
  90th percentile 1.6%, against within-run standard errors of 0.05% (median): RUN_TO_RUN_SD is
  that 90th percentile, added to every line, since one line is one run.

So per line var(log median) = (within-run SE / median)^2 + RUN_TO_RUN_SD^2; a speedup's interval
is exp(log speedup +- 1.96 sqrt(var_solution + var_baseline)), and a geometric mean over n
workloads has variance sum(var_i) / n^2 (workloads taken as independent). "Within noise" means
the interval holds 1.0. docs/harness.md says the same for readers of the report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from envaudit.schema.result_line import TimingStats

RUN_TO_RUN_SD = 0.016
Z95 = 1.959964
SIGMA_PER_IQR = 1 / 1.349
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def log_median_variance(timing: TimingStats | None) -> float | None:
    """var(log median) of one timing mode of one line; None when it has no median."""
    if timing is None:
        return None
    median, iqr, samples = timing.median_ms, timing.iqr_ms, timing.iterations
    if median is None or median <= 0:
        return None
    within = 0.0
    if iqr is not None and samples is not None and samples > 1:
        within = MEDIAN_SE_FACTOR * iqr * SIGMA_PER_IQR / math.sqrt(samples) / median
    return within**2 + RUN_TO_RUN_SD**2


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
