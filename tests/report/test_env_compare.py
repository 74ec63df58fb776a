"""Intervals on environment comparisons (envaudit.report.env_compare) from a few repeated runs:
Welch's t interval on log run medians covers a known ratio 95% of the time at six runs a side,
and at three, where the percentile bootstrap it replaced did not; edge cases give a degenerate
interval or none instead of a wrong one; the hand-written t quantile matches the tables."""

from __future__ import annotations

import math
import random

import numpy as np

from envaudit.report.env_compare import (
    RunMedians,
    compare,
    log_ratio,
    t_quantile,
    table,
)

EXPERIMENTS = 2000


def experiment(
    rng: random.Random, ratios: list[float], sds: list[tuple[float, float]], runs: int
) -> tuple[RunMedians, RunMedians]:
    """One synthetic comparison: per workload `runs` log-normal run medians per env, OTHER's
    true ratio to BASE ratios[i], log sds (base, other) sds[i]."""
    base: RunMedians = {}
    other: RunMedians = {}
    for i, (ratio, (sd_base, sd_other)) in enumerate(zip(ratios, sds, strict=True)):
        base[f"w{i}"] = {"graph": [rng.lognormvariate(0.0, sd_base) for _ in range(runs)]}
        other[f"w{i}"] = {"graph": [ratio * rng.lognormvariate(0.0, sd_other) for _ in range(runs)]}
    return base, other


def holds(bounds: list[float] | None, value: float) -> bool:
    assert bounds is not None
    return bounds[0] <= value <= bounds[1]


def old_bootstrap(base: list[float], other: list[float], rng: np.random.Generator) -> list[float]:
    """The construction this module had until issue 41: runs resampled with replacement within
    each side, ratio of the resamples' medians, 2.5% and 97.5% percentiles (1,000 draws here,
    10,000 there; enough for the coverage's second decimal)."""
    draws = 1000
    a, b = np.asarray(base), np.asarray(other)
    medians_a = np.median(a[rng.integers(0, len(a), (draws, len(a)))], axis=1)
    medians_b = np.median(b[rng.integers(0, len(b), (draws, len(b)))], axis=1)
    ordered = np.sort(medians_b / medians_a)
    return [float(ordered[int(0.025 * draws)]), float(ordered[int(0.975 * draws) - 1])]


def coverage(runs: int, sds: tuple[float, float], seed: int) -> tuple[float, float]:
    """(Welch through `compare`, old bootstrap): the share of EXPERIMENTS whose interval holds
    the true ratio 0.97, on the same synthetic runs."""
    rng, draws = random.Random(seed), np.random.default_rng(seed)
    welch = bootstrap = 0
    for _ in range(EXPERIMENTS):
        base, other = experiment(rng, [0.97], [sds], runs)
        [row] = compare(base, other)["workloads"]
        welch += holds(row["ci95"], 0.97)
        bootstrap += holds(old_bootstrap(base["w0"]["graph"], other["w0"]["graph"], draws), 0.97)
    return welch / EXPERIMENTS, bootstrap / EXPERIMENTS


def test_the_interval_holds_95_percent_at_six_runs_and_at_three() -> None:
    """Unequal spreads (1% and 2% log sd, so Welch's df matters): at six runs a side the t
    interval holds the true ratio 93-97% of 2000 times; so did the old bootstrap, but at three
    runs (MIN_RUNS admits two) the bootstrap fell well short while the t interval held."""
    welch_six, bootstrap_six = coverage(6, (0.01, 0.02), seed=1)
    welch_three, bootstrap_three = coverage(3, (0.01, 0.02), seed=2)
    assert 0.93 <= welch_six <= 0.97, welch_six
    assert 0.93 <= welch_three <= 0.97, welch_three
    assert 0.92 <= bootstrap_six <= 0.97, bootstrap_six
    assert bootstrap_three < 0.90 and welch_three - bootstrap_three > 0.05, bootstrap_three


def test_the_geometric_mean_interval_holds_95_percent() -> None:
    """Three workloads, different true ratios and spreads, 1000 experiments at six and at three
    runs: Welch-Satterthwaite df over all the sample variances holds 93-97.5%; the smallest
    workload's df (the conservative choice not taken) holds more than needed at three runs."""
    ratios = [0.97, 1.0, 1.02]
    sds = [(0.005, 0.02), (0.01, 0.01), (0.02, 0.005)]
    true = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    for runs, seed in ((6, 3), (3, 4)):
        rng = random.Random(seed)
        held = held_by_smallest_df = 0
        for _ in range(EXPERIMENTS // 2):
            base, other = experiment(rng, ratios, sds, runs)
            result = compare(base, other)
            held += holds(result["geomean"]["ci95"], true)
            found = [log_ratio(base[w]["graph"], other[w]["graph"]) for w in sorted(base)]
            variance = sum(f.variance or 0.0 for f in found) / len(found) ** 2
            smallest = min(f.df for f in found if f.df is not None)
            half = t_quantile(0.975, smallest) * math.sqrt(variance)
            mean = math.log(result["geomean"]["ratio"])
            held_by_smallest_df += abs(mean - math.log(true)) <= half
        share = held / (EXPERIMENTS // 2)
        assert 0.93 <= share <= 0.975, (runs, share)
        if runs == 3:
            assert held_by_smallest_df / (EXPERIMENTS // 2) > 0.98


def test_identical_runs_give_a_zero_width_interval() -> None:
    base: RunMedians = {"w": {"graph": [1.0] * 6}, "same": {"graph": [2.0] * 6}}
    other: RunMedians = {"w": {"graph": [1.1] * 6}, "same": {"graph": [2.0] * 6}}
    result = compare(base, other)
    rows = {r["workload"]: r for r in result["workloads"]}
    low, high = rows["w"]["ci95"]
    assert math.isclose(low, 1.1) and math.isclose(high, 1.1) and low <= high
    assert rows["w"]["within_noise"] is False
    assert rows["same"]["ci95"] == [1.0, 1.0] and rows["same"]["within_noise"] is True
    geo = result["geomean"]
    assert math.isclose(geo["ci95"][0], geo["ci95"][1]) and geo["within_noise"] is False
    # one side constant, the other not: df is the noisy side's n - 1, the interval finite
    one_sided = log_ratio([1.0] * 6, [1.0, 1.01, 0.99, 1.02, 0.98, 1.0])
    assert one_sided.df is not None and math.isclose(one_sided.df, 5.0)


def test_under_two_runs_on_a_side_gives_no_interval() -> None:
    """One run has no spread to estimate: a ratio, but no interval and no verdict of a win."""
    base: RunMedians = {"w": {"graph": [1.0]}, "x": {"graph": [1.0, 1.01, 0.99]}}
    other: RunMedians = {"w": {"graph": [0.5, 0.51]}, "x": {"graph": [0.9, 0.91, 0.89]}}
    result = compare(base, other)
    rows = {r["workload"]: r for r in result["workloads"]}
    assert rows["w"]["runs"] == [1, 2] and math.isclose(rows["w"]["ratio"], math.sqrt(0.5 * 0.51))
    assert rows["w"]["ci95"] is None and rows["w"]["within_noise"] is None
    assert rows["x"]["ci95"] is not None and rows["x"]["within_noise"] is False
    assert result["geomean"]["ci95"] is None and result["geomean"]["within_noise"] is None
    text = table(result, ("a", "b"))
    assert "| w | graph | 1, 2 | 0.5050 | – | no interval (under 2 runs) |" in text
    assert "b faster" in text and "| geometric mean |" in text


def test_the_t_quantile_matches_the_tables() -> None:
    for df, value in ((1, 12.706), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423)):
        assert round(t_quantile(0.975, df), 4 if value < 10 else 3) == value
    assert round(t_quantile(0.995, 5), 3) == 4.032 and round(t_quantile(0.95, 10), 3) == 1.812
    assert round(t_quantile(0.975, 1e5), 3) == 1.960 == round(t_quantile(0.975, math.inf), 3)
    assert t_quantile(0.025, 5) == -t_quantile(0.975, 5) and t_quantile(0.5, 3) == 0.0
    # Welch's df is rarely whole: between its neighbours, and monotone
    assert t_quantile(0.975, 6) < t_quantile(0.975, 5.5) < t_quantile(0.975, 5)


def test_the_report_says_its_env_comparisons_follow_the_one_rule() -> None:
    """The report's environment comparisons are by the one comparison rule (Welch's t is
    scripts/env_ratio.py's), and the report says so."""
    from envaudit.report.glance import ENV_COMPARISON_INTRO

    assert "one comparison rule" in ENV_COMPARISON_INTRO and "Welch" not in ENV_COMPARISON_INTRO
    assert "compare --across-envs" in ENV_COMPARISON_INTRO
