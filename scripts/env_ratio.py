"""Time ratio of one solution between two environments, with a 95% confidence interval from
repeated runs (e.g. FlashMLA built with nvcc 13.3 vs 13.1: same source, same harness, same GPU).

    python scripts/env_ratio.py BASE.jsonl OTHER.jsonl [--solution S] [--json] [--seed N]

Each file holds result lines of repeated runs (one line per workload per run, appended by
`envaudit run --report`; merge would keep only the newest). Per workload the ratio is
OTHER/BASE of the medians over runs of each run's timing median (graph where both have it,
else eager): below 1, OTHER is faster. The interval is a percentile bootstrap: runs are
resampled with replacement within each side (10,000 draws); the geometric mean over workloads
resamples every workload in each draw. "within noise" when the interval contains 1.0.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

DRAWS = 10_000


def run_medians(path: Path, solution: str | None) -> dict[str, dict[str, list[float]]]:
    """workload label -> mode -> one median per run (PASSED lines only)."""
    found: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for raw in path.read_text().splitlines():
        if not raw.strip():
            continue
        line = json.loads(raw)
        if line.get("status") != "PASSED" or (solution and line.get("solution") != solution):
            continue
        label = str(line["workload"].get("label") or line["workload"]["uuid"])
        for mode in ("graph", "eager"):
            median = ((line.get("timing") or {}).get(mode) or {}).get("median_ms")
            if isinstance(median, int | float) and median > 0:
                found[label][mode].append(float(median))
    return found


def _mode(a: dict[str, list[float]], b: dict[str, list[float]]) -> str | None:
    return next((m for m in ("graph", "eager") if a.get(m) and b.get(m)), None)


def _interval(draws: list[float]) -> tuple[float, float]:
    ordered = sorted(draws)
    return ordered[int(0.025 * len(ordered))], ordered[int(0.975 * len(ordered)) - 1]


def compare(
    base: dict[str, dict[str, list[float]]],
    other: dict[str, dict[str, list[float]]],
    seed: int = 0,
) -> dict[str, Any]:
    rng = random.Random(seed)
    rows, per_draw = [], [0.0] * DRAWS
    for label in sorted(set(base) & set(other)):
        mode = _mode(base[label], other[label])
        if mode is None:
            continue
        a, b = base[label][mode], other[label][mode]
        ratio = statistics.median(b) / statistics.median(a)
        draws = []
        for i in range(DRAWS):
            ra = statistics.median(rng.choices(a, k=len(a)))
            rb = statistics.median(rng.choices(b, k=len(b)))
            draws.append(rb / ra)
            per_draw[i] += math.log(rb / ra)
        low, high = _interval(draws)
        rows.append(
            {
                "workload": label,
                "mode": mode,
                "runs": [len(a), len(b)],
                "ratio": ratio,
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


def table(result: dict[str, Any], names: tuple[str, str]) -> str:
    lines = [
        f"| workload | timing | runs ({names[0]}, {names[1]}) | {names[1]}/{names[0]} | 95% CI |"
        " verdict |",
        "|---|---|---|---:|---|---|",
    ]
    for row in result["workloads"]:
        low, high = row["ci95"]
        verdict = "within noise" if row["within_noise"] else _faster(row["ratio"], names)
        lines.append(
            f"| {row['workload']} | {row['mode']} | {row['runs'][0]}, {row['runs'][1]}"
            f" | {row['ratio']:.4f} | [{low:.4f}, {high:.4f}] | {verdict} |"
        )
    geo = result["geomean"]
    if geo is not None:
        verdict = "within noise" if geo["within_noise"] else _faster(geo["ratio"], names)
        lines.append(
            f"| geometric mean | | | {geo['ratio']:.4f}"
            f" | [{geo['ci95'][0]:.4f}, {geo['ci95'][1]:.4f}] | {verdict} |"
        )
    return "\n".join(lines)


def _faster(ratio: float, names: tuple[str, str]) -> str:
    return f"{names[1]} faster" if ratio < 1 else f"{names[0]} faster"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path)
    parser.add_argument("other", type=Path)
    parser.add_argument("--solution")
    parser.add_argument("--names", nargs=2, default=None)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    names: tuple[str, str] = (
        (args.names[0], args.names[1]) if args.names else (args.base.stem, args.other.stem)
    )
    result = compare(
        run_medians(args.base, args.solution), run_medians(args.other, args.solution), args.seed
    )
    print(json.dumps(result, indent=1) if args.json else table(result, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
