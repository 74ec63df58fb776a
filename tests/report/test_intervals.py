"""Speedup intervals (envaudit.report.intervals) on synthetic samples with known answers, and the
preference rule that uses them: a win within noise does not beat the baseline, and two solutions
whose ratio's interval holds 1.0 are called indistinguishable."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path

from envaudit.report.intervals import (
    RUN_TO_RUN_SD,
    geomean_interval,
    holds_one,
    log_median_variance,
    speedup_interval,
)
from envaudit.schema.result_line import TimingStats
from tests.report.test_merge import line, summarize, write


def timing(samples: list[float]) -> TimingStats:
    q1, median, q3 = statistics.quantiles(samples, n=4)
    return TimingStats(median_ms=median, iqr_ms=q3 - q1, iterations=len(samples))


def test_the_within_run_part_is_the_spread_of_a_sample_median() -> None:
    """Normal samples: the formula's standard error of the median matches the spread of medians
    over 400 repeated draws within 10%; the run-to-run floor comes on top of it."""
    rng = random.Random(7)
    medians, predicted = [], []
    for _ in range(400):
        samples = [rng.gauss(1.0, 0.05) for _ in range(500)]
        medians.append(statistics.median(samples))
        variance = log_median_variance(timing(samples))
        assert variance is not None
        predicted.append(math.sqrt(variance - RUN_TO_RUN_SD["cuda_events"] ** 2))
    observed = statistics.stdev(math.log(m) for m in medians)
    assert abs(statistics.fmean(predicted) / observed - 1) < 0.1
    # exact value for a textbook case: sigma 0.1 (IQR 0.1349), 100 samples, median 1
    known = log_median_variance(TimingStats(median_ms=1.0, iqr_ms=0.1349, iterations=100))
    assert known is not None
    floor = RUN_TO_RUN_SD["cuda_events"]
    assert math.isclose(known, (math.sqrt(math.pi / 2) * 0.1 / 10) ** 2 + floor**2)


def test_equal_timings_are_within_noise_and_a_tenth_faster_is_not() -> None:
    base = TimingStats(median_ms=1.0, iqr_ms=0.01, iterations=1000)
    same = speedup_interval(1.0, base, base)
    faster = speedup_interval(1.0 / 0.9, base.model_copy(update={"median_ms": 0.9}), base)
    assert same is not None and faster is not None
    assert holds_one(same[0]) is True and holds_one(faster[0]) is False
    low, high = faster[0]
    assert low < 1 / 0.9 < high and high / low < 1.1  # about +-4.5% from two 1.6% floors
    assert speedup_interval(2.0, TimingStats(median_ms=0.5), None) is None  # no baseline
    # the geometric mean of n equal workloads narrows by sqrt(n)
    one = geomean_interval([2.0], [faster[1]])
    four = geomean_interval([2.0] * 4, [faster[1]] * 4)
    assert one is not None and four is not None
    assert math.isclose(math.log(four[1] / four[0]) * 2, math.log(one[1] / one[0]))


def with_iqr(entry: dict, iqr: float = 0.001) -> dict:
    for mode in ("eager", "graph"):
        entry["timing"][mode] |= {
            "iqr_ms": iqr * entry["timing"][mode]["median_ms"],
            "iterations": 1000,
        }
    return entry


def test_a_win_within_noise_does_not_beat_the_baseline(tmp_path: Path) -> None:
    from envaudit.report.choice import preferred_solutions

    lines = [with_iqr(line("d-torch", w, 1.0)) for w in ("w1", "w2")]
    lines += [with_iqr(line("d-fast", w, 0.99, env="fast-env")) for w in ("w1", "w2")]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    [device] = preferred_solutions(summary).choices["d"].values()
    assert device.choice is not None and device.choice.solution == "d-torch"  # 1.01x, in noise
    assert device.runner_up is not None and device.runner_up.within_noise is True
    assert device.indistinguishable is True


def test_a_clear_win_is_chosen_with_its_interval(tmp_path: Path) -> None:
    from envaudit.report.choice import preferred_solutions

    lines = [with_iqr(line("d-torch", w, 1.0)) for w in ("w1", "w2")]
    lines += [with_iqr(line("d-fast", w, 0.5, env="fast-env")) for w in ("w1", "w2")]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    [device] = preferred_solutions(summary).choices["d"].values()
    best = device.choice
    assert best is not None and best.solution == "d-fast" and best.within_noise is False
    assert best.ci95 is not None
    low, high = best.ci95
    assert low < 2.0 < high and device.indistinguishable is False
