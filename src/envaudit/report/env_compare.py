"""One solution's time in two environments: the report's comparison, and a Welch t interval over
many repeated runs for scripts/env_ratio.py.

The report (`env_comparisons`) compares two environments by its one comparison rule
(report/intervals.py `ratio_of`, as the speedups, at a glance and `envaudit compare
--across-envs` do): the newest line of each env per workload, each figure's floor widened by its
group's own scatter, and the geometric mean with its interval; so the environment comparison,
the choice between the two envs at a glance and `compare --across-envs` give one verdict.

The rest of this module is scripts/env_ratio.py's, for a question the floor cannot answer: with
many alternated runs of both builds, is a difference smaller than the run-to-run floor real?
The question FlashMLA built with nvcc 13.1 and 13.3 asks: same source, same harness, same GPU,
only the compiler differs; is one build faster, and by more than the run-to-run noise? A single
pair of medians cannot say (two runs of one build differ by a percent or more), so the answer
needs repeated runs of both, ideally alternated, and an interval.

Each run gives one number per workload, its timing median (graph where both envs have it, else
eager). Per workload the ratio is OTHER/BASE of the geometric means of those run medians (below
1, OTHER is faster), with Welch's t interval on their logs: the difference of the mean logs,
variance s_o^2/n_o + s_b^2/n_b, Welch-Satterthwaite degrees of freedom, a Student t quantile.
Assumption: within each env the log run medians are roughly normal and the runs independent
(alternating the envs keeps slow drift out of the difference). The geometric mean over k
workloads is exp of the mean log ratio, with variance sum(var_i) / k^2 and Welch-Satterthwaite
df for that sum of 2k sample variances, which takes the workloads as independent (in the
committed FlashMLA runs, 18 pairs of workloads over six runs, the correlation of one run's
deviations averaged -0.18: no sign of a shared run effect). The smallest workload's df, the
conservative choice not taken, held 96-100% where 95% was asked, up to twice as wide.

Why not the percentile bootstrap this replaced (runs resampled within each side, ratio of
medians): a few runs give few distinct resamples and the percentiles make no allowance for a
spread estimated from a handful of runs. On simulated log-normal runs it held about 95% from
five runs a side up, but 59-66% at two, 83-89% at three and 89-93% at four, and MIN_RUNS lets
two runs into the report; Welch's t held 94-98% at every size from two to twelve, draws nothing
at random, and at six runs was about 7% narrower (tests/report/test_env_compare.py checks six
and three runs). The price: a mean of logs follows one slow run further than a median does; its
variance grows with it, so the interval widens rather than misleads (97-98% held with 10-20% of
runs 3-5% slow in both envs).

A ratio is "within noise" when its interval contains 1.0. With many workloads, about one in
twenty intervals excludes 1.0 by chance alone: read the geometric mean first. Fewer than
MIN_RUNS runs in an env give a ratio but no interval (None: one run has no spread to estimate);
identical runs give a zero-width interval. scipy is no dependency: the t quantile comes from the
regularized incomplete beta function (continued fraction, math.lgamma), checked against tables.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envaudit.report.intervals import Speedup, geomean_of, holds_one, ratio_of
from envaudit.schema.result_line import ResultLine
from envaudit.schema.summary import EnvComparison, EnvWorkload, Figure, Ratio

MIN_RUNS = 2
CONFIDENCE = 0.95

# workload label -> timing mode -> one median per run
RunMedians = dict[str, dict[str, list[float]]]


def run_medians(lines: Iterable[ResultLine], solution: str | None = None) -> RunMedians:
    """Per workload and timing mode, each PASSED run's median (ms)."""
    found: RunMedians = defaultdict(lambda: defaultdict(list))
    for line in lines:
        if not line.passed or (solution and line.solution != solution):
            continue
        label = str(line.workload.label or line.workload.uuid)
        for mode in ("graph", "eager"):
            stats = line.stats(mode)
            median = stats.positive_median() if stats is not None else None
            if median is not None:
                found[label][mode].append(median)
    return found


def _mode(a: Mapping[str, list[float]], b: Mapping[str, list[float]]) -> str | None:
    return next(
        (m for m in ("graph", "eager") if len(a.get(m, ())) >= 1 and len(b.get(m, ())) >= 1),
        None,
    )


# --- Student t quantile (stdlib only: scipy is not a dependency) ---------------------------

_BETACF_ITERATIONS = 300
# Above this many degrees of freedom t_quantile returns the normal quantile: they differ by
# under 3e-6 at 97.5% there, and math.lgamma of df/2 loses more digits than that beyond it.
NORMAL_DF = 1e6
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz), which converges
    fast for x < (a + 1) / (a + b + 2); `_regularized_beta` swaps arguments to stay there."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, _BETACF_ITERATIONS + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _regularized_beta(a: float, b: float, x: float, y: float) -> float:
    """I_x(a, b), the regularized incomplete beta function, for a, b > 0, 0 <= x <= 1 and
    y = 1 - x, passed in by the caller so that x near 1 keeps its digits."""
    if x <= 0.0 or y <= 0.0:
        return 0.0 if x <= 0.0 else 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    log_front += a * math.log(x) + b * math.log(y)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, y) / b


def _t_upper_tail(t: float, df: float) -> float:
    """P(T > t) for t >= 0 and Student's T with df degrees of freedom."""
    return 0.5 * _regularized_beta(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))


def _t_density(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df > 0 (not necessarily whole) degrees of freedom;
    df above NORMAL_DF (inf included) gives the normal quantile. Newton's method on the tail
    from the normal quantile, kept inside a shrinking bracket by bisection, so it converges for
    every df (df = 1 has tails too heavy for plain Newton)."""
    if not 0.0 < p < 1.0 or not df > 0.0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    normal = statistics.NormalDist().inv_cdf(p)
    if df > NORMAL_DF or p == 0.5:
        return normal if df > NORMAL_DF else 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    tail = 1.0 - p
    low, high = 0.0, max(2.0 * normal, 1.0)
    while _t_upper_tail(high, df) > tail:
        low, high = high, 2.0 * high
    t = min(max(normal, low), high)
    for _ in range(200):
        excess = _t_upper_tail(t, df) - tail  # > 0: t is too small
        if abs(excess) <= 1e-13 * tail:
            break
        if excess > 0:
            low = t
        else:
            high = t
        step = t + excess / _t_density(t, df)
        t = step if low < step < high else (low + high) / 2
        if high - low <= 1e-14 * high:
            break
    return t


# --- Welch's t interval on log run medians -------------------------------------------------


@dataclass(frozen=True)
class LogRatio:
    """log(OTHER/BASE) of one workload's geometric means over runs, with var(estimate) and
    Welch-Satterthwaite df; variance is None under MIN_RUNS runs on a side (no spread to
    estimate) and df is None when both sides' runs are identical (zero variance)."""

    value: float
    variance: float | None
    df: float | None


def log_ratio(base: Sequence[float], other: Sequence[float]) -> LogRatio:
    """Welch's t on the logs of two envs' run medians: difference of mean logs, its variance
    s_o^2/n_o + s_b^2/n_b, and the Welch-Satterthwaite degrees of freedom."""
    logs = [math.log(v) for v in base], [math.log(v) for v in other]
    value = statistics.fmean(logs[1]) - statistics.fmean(logs[0])
    if min(len(logs[0]), len(logs[1])) < MIN_RUNS:
        return LogRatio(value, None, None)
    parts = [statistics.variance(side) / len(side) for side in logs]
    variance = sum(parts)
    if variance == 0.0:
        return LogRatio(value, 0.0, None)
    df = variance**2 / sum(
        part**2 / (len(side) - 1) for part, side in zip(parts, logs, strict=True)
    )
    return LogRatio(value, variance, df)


def _bounds(value: float, variance: float | None, df: float | None) -> list[float] | None:
    """exp(value +- t(df) sqrt(variance)); zero width for zero variance, None without one."""
    if variance is None:
        return None
    half = 0.0 if df is None else t_quantile(0.5 + CONFIDENCE / 2, df) * math.sqrt(variance)
    return [math.exp(value - half), math.exp(value + half)]


def geomean_log_ratio(ratios: Sequence[LogRatio]) -> LogRatio:
    """The mean of k workloads' log ratios, var sum(var_i) / k^2 (workloads independent), and
    Welch-Satterthwaite df for that sum: (sum var_i)^2 / sum(var_i^2 / df_i), the same rule as
    within a workload, applied to all 2k sample variances: 95-96% held in simulation, where the
    smallest workload's df held 96-100% and was up to twice as wide at three runs
    (tests/report/test_env_compare.py). No variance if any workload lacks one."""
    value = statistics.fmean(r.value for r in ratios)
    variances = [r.variance for r in ratios]
    if any(v is None for v in variances):
        return LogRatio(value, None, None)
    total = sum(v or 0.0 for v in variances)
    spread = sum((r.variance or 0.0) ** 2 / r.df for r in ratios if r.df is not None)
    df = total**2 / spread if spread > 0 else None
    return LogRatio(value, total / len(ratios) ** 2, df)


def compare(base: RunMedians, other: RunMedians, seed: int = 0) -> dict[str, Any]:
    """OTHER/BASE per workload both timed and over all of them, with Welch t intervals.

    `seed` is unused (the interval draws nothing); it stays so callers that pass one, from the
    bootstrap this replaced, keep working. `ci95` and `within_noise` are None for a workload
    with fewer than MIN_RUNS runs on a side, and for the geometric mean if any workload has."""
    del seed
    rows: list[dict[str, Any]] = []
    logs: list[LogRatio] = []
    for label in sorted(set(base) & set(other)):
        mode = _mode(base[label], other[label])
        if mode is None:
            continue
        a, b = base[label][mode], other[label][mode]
        found = log_ratio(a, b)
        logs.append(found)
        bounds = _bounds(found.value, found.variance, found.df)
        rows.append(
            {
                "workload": label,
                "mode": mode,
                "runs": [len(a), len(b)],
                "ratio": math.exp(found.value),
                "ci95": bounds,
                "within_noise": holds_one(bounds),
            }
        )
    if not rows:
        return {"workloads": [], "geomean": None}
    geo = geomean_log_ratio(logs)
    bounds = _bounds(geo.value, geo.variance, geo.df)
    return {
        "workloads": rows,
        "geomean": {
            "ratio": math.exp(geo.value),
            "ci95": bounds,
            "within_noise": holds_one(bounds),
        },
    }


def verdict(ratio: float, within_noise: bool | None, names: tuple[str, str]) -> str:
    """In words, for OTHER/BASE = ratio with names (BASE, OTHER); within_noise None means no
    interval (under MIN_RUNS runs on a side), which must not read as a win."""
    if within_noise is None:
        return f"no interval (under {MIN_RUNS} runs)"
    if within_noise:
        return "within noise"
    return f"{names[1]} faster" if ratio < 1 else f"{names[0]} faster"


def _cell(bounds: Sequence[float] | None) -> str:
    return "–" if bounds is None else f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"


def table(result: Mapping[str, Any], names: tuple[str, str]) -> str:
    """A markdown table of `compare`'s result, names = (BASE, OTHER)."""
    lines = [
        f"| workload | timing | runs ({names[0]}, {names[1]}) | {names[1]}/{names[0]} | 95% CI |"
        " verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for row in result["workloads"]:
        lines.append(
            f"| {row['workload']} | {row['mode']} | {row['runs'][0]}, {row['runs'][1]}"
            f" | {row['ratio']:.4f} | {_cell(row['ci95'])}"
            f" | {verdict(row['ratio'], row['within_noise'], names)} |"
        )
    geo = result["geomean"]
    if geo is not None:
        lines.append(
            f"| geometric mean | | | {geo['ratio']:.4f} | {_cell(geo['ci95'])}"
            f" | {verdict(geo['ratio'], geo['within_noise'], names)} |"
        )
    return "\n".join(lines)


def env_comparisons(
    lines: Iterable[ResultLine],
    declared: Mapping[str, str | None],
    group_of: Callable[[ResultLine], str],
    figure: Callable[[ResultLine], Figure | None],
    number: Callable[[ResultLine], int | None],
    runs: Callable[[ResultLine], int],
    differ_in: Callable[[str, str], list[str] | None],
) -> list[EnvComparison]:
    """Every solution measured in two or more envs on one GPU model, by the report's one
    comparison rule (report/intervals.py `ratio_of`): per workload both envs passed, the newest
    line of each env (`lines`: the newest per key), OTHER's figure over BASE's with its 95%
    interval (each figure's floor, widened by its group's own scatter where repeated runs show
    a wider one), and the geometric mean with its interval. The declared env is OTHER, each
    other env a BASE (below 1 the declared env is faster). A line whose time the judge flagged
    is left out. `figure(line)` is the figure with its group's scatter, `number(line)` its
    results line, `runs(line)` the lines read of its group, `differ_in(a, b)` what the two
    envs' locks differ in."""
    newest: dict[tuple[str, str, str], dict[str, ResultLine]] = defaultdict(dict)
    for line in lines:
        side = newest[(line.solution, group_of(line), str(line.context.env or ""))]
        held = side.get(line.workload.uuid)
        if held is None or (line.timestamp or "") > (held.timestamp or ""):
            side[line.workload.uuid] = line
    envs_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for solution, model, env in sorted(newest):
        envs_of[(solution, model)].append(env)
    found = []
    for (solution, model), envs in sorted(envs_of.items()):
        if len(envs) < 2:
            continue
        wanted = declared.get(solution)
        other = wanted if wanted in envs else envs[-1]
        for base in (e for e in envs if e != other):
            sides = newest[(solution, model, base)], newest[(solution, model, other)]
            rows, ratios = _workloads(sides, (base, other), figure, number, runs)
            geo = geomean_of(ratios)
            if geo is None:
                continue
            found.append(
                EnvComparison(
                    solution=solution,
                    gpu_model=model,
                    base=base,
                    other=other,
                    workloads=rows,
                    geomean=geo,
                    differ_in=differ_in(base, other),
                )
            )
    return found


def _workloads(
    sides: tuple[Mapping[str, ResultLine], Mapping[str, ResultLine]],
    names: tuple[str, str],
    figure: Callable[[ResultLine], Figure | None],
    number: Callable[[ResultLine], int | None],
    runs: Callable[[ResultLine], int],
) -> tuple[list[EnvWorkload], list[Speedup]]:
    """Per workload both sides passed with an unflagged figure: OTHER/BASE by `ratio_of`."""
    rows, ratios = [], []
    common = sorted(
        set(sides[0]) & set(sides[1]),
        key=lambda u: (str(sides[0][u].workload.label or ""), u),
    )
    for uuid in common:
        base, other = sides[0][uuid], sides[1][uuid]
        if not (base.passed and other.passed) or _flagged(base) or _flagged(other):
            continue
        figures = figure(base), figure(other)
        if figures[0] is None or figures[1] is None:
            continue
        # time OTHER / time BASE is the speedup of BASE's line over OTHER's as the base
        ratio = ratio_of(figures[0], figures[1], names=names)
        ratios.append(ratio)
        rows.append(
            EnvWorkload(
                workload=str(base.workload.label or uuid[:8]),
                modes=ratio.modes,
                runs=[runs(base), runs(other)],
                results_lines=[number(base), number(other)],
                ratio=Ratio(
                    value=ratio.value, ci95=list(ratio.ci95), within_noise=ratio.within_noise
                ),
                caveats=list(ratio.caveats),
            )
        )
    return rows, ratios


def _flagged(line: ResultLine) -> bool:
    return bool(line.timing is not None and line.timing.flags)
