"""One solution's time in two environments, with a 95% confidence interval from repeated runs.

The question FlashMLA built with nvcc 13.1 and 13.3 asks: same source, same harness, same GPU,
only the compiler differs; is one build faster, and by more than the run-to-run noise? A single
pair of medians cannot say (two runs of one build differ by a percent or more), so the answer
needs repeated runs of both, ideally alternated, and an interval.

Per workload the ratio is OTHER/BASE of the medians over runs of each run's timing median
(graph where both have it, else eager): below 1, OTHER is faster. The interval is a percentile
bootstrap: runs are resampled with replacement within each side (10,000 draws, fixed seed); the
geometric mean over workloads resamples every workload in each draw. A ratio is "within noise"
when its interval contains 1.0. With many workloads, about one in twenty intervals excludes 1.0
by chance alone: read the geometric mean first.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from envaudit.schema.result_line import ResultLine

DRAWS = 10_000
MIN_RUNS = 2

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


def _interval(draws: list[float]) -> tuple[float, float]:
    ordered = sorted(draws)
    return ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]


def compare(base: RunMedians, other: RunMedians, seed: int = 0) -> dict[str, Any]:
    """OTHER/BASE per workload both timed and over all of them, with bootstrap intervals."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    per_draw = [0.0] * DRAWS
    for label in sorted(set(base) & set(other)):
        mode = _mode(base[label], other[label])
        if mode is None:
            continue
        a, b = base[label][mode], other[label][mode]
        draws = []
        for i in range(DRAWS):
            ratio = statistics.median(rng.choices(b, k=len(b))) / statistics.median(
                rng.choices(a, k=len(a))
            )
            draws.append(ratio)
            per_draw[i] += math.log(ratio)
        low, high = _interval(draws)
        rows.append(
            {
                "workload": label,
                "mode": mode,
                "runs": [len(a), len(b)],
                "ratio": statistics.median(b) / statistics.median(a),
                "ci95": [low, high],
                "within_noise": low <= 1.0 <= high,
            }
        )
    if not rows:
        return {"workloads": [], "geomean": None}
    geo = math.exp(statistics.fmean(math.log(r["ratio"]) for r in rows))
    low, high = _interval([math.exp(total / len(rows)) for total in per_draw])
    return {
        "workloads": rows,
        "geomean": {"ratio": geo, "ci95": [low, high], "within_noise": low <= 1.0 <= high},
    }


def verdict(ratio: float, within_noise: bool, names: tuple[str, str]) -> str:
    """In words, for OTHER/BASE = ratio with names (BASE, OTHER)."""
    if within_noise:
        return "within noise"
    return f"{names[1]} faster" if ratio < 1 else f"{names[0]} faster"


def table(result: Mapping[str, Any], names: tuple[str, str]) -> str:
    """A markdown table of `compare`'s result, names = (BASE, OTHER)."""
    lines = [
        f"| workload | timing | runs ({names[0]}, {names[1]}) | {names[1]}/{names[0]} | 95% CI |"
        " verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for row in result["workloads"]:
        low, high = row["ci95"]
        lines.append(
            f"| {row['workload']} | {row['mode']} | {row['runs'][0]}, {row['runs'][1]}"
            f" | {row['ratio']:.4f} | [{low:.4f}, {high:.4f}]"
            f" | {verdict(row['ratio'], row['within_noise'], names)} |"
        )
    geo = result["geomean"]
    if geo is not None:
        lines.append(
            f"| geometric mean | | | {geo['ratio']:.4f}"
            f" | [{geo['ci95'][0]:.4f}, {geo['ci95'][1]:.4f}]"
            f" | {verdict(geo['ratio'], geo['within_noise'], names)} |"
        )
    return "\n".join(lines)


def env_comparisons(
    lines: Iterable[ResultLine],
    declared: Mapping[str, str | None],
    group_of: Callable[[ResultLine], str],
) -> list[dict[str, Any]]:
    """Every solution measured in two or more envs on one GPU model, with at least MIN_RUNS
    repeated runs of a common workload in each: the declared env against each other env
    (ratio declared/other; below 1 the declared env is faster). `declared` maps solution ->
    its declared env; `group_of(line)` names the GPU model a line belongs to."""
    runs: dict[tuple[str, str, str], list[ResultLine]] = defaultdict(list)
    for line in lines:
        runs[(line.solution, group_of(line), str(line.context.env or ""))].append(line)
    envs_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for solution, model, env in sorted(runs):
        envs_of[(solution, model)].append(env)
    found = []
    for (solution, model), envs in sorted(envs_of.items()):
        if len(envs) < 2:
            continue
        other = declared.get(solution)
        other = other if other in envs else envs[-1]
        for base in (e for e in envs if e != other):
            medians = (
                run_medians(runs[(solution, model, base)]),
                run_medians(runs[(solution, model, other)]),
            )
            result = compare(*_repeated(*medians))
            if result["geomean"] is not None:
                found.append(
                    {"solution": solution, "gpu_model": model, "base": base, "other": other}
                    | result
                )
    return found


def _repeated(base: RunMedians, other: RunMedians) -> tuple[RunMedians, RunMedians]:
    """Only the workloads with MIN_RUNS runs or more on both sides, in the mode compared."""
    keep_base: RunMedians = {}
    keep_other: RunMedians = {}
    for label in set(base) & set(other):
        mode = _mode(base[label], other[label])
        if mode and min(len(base[label][mode]), len(other[label][mode])) >= MIN_RUNS:
            keep_base[label] = {mode: base[label][mode]}
            keep_other[label] = {mode: other[label][mode]}
    return keep_base, keep_other
