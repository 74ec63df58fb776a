"""How much a figure moves between runs: the floors of report/intervals.py (RUN_TO_RUN_SD).

Groups the PASSED lines of result files by solution, workload, env and GPU model, and for each
group takes the standard deviation of the log medians of one kind of figure (graph replays;
eager timings within HOST_BOUND_RATIO of the line's graph figure, device-bound; eager timings
above it, host-bound; eager timings of lines with no graph figure; CPU wall clocks), between the
runs on one card and between cards of the model. Prints the count, median and 90th percentile
per kind (the 90th percentile is the floor).

    python benchmarks/run_to_run.py docs/report/results.jsonl [MORE.jsonl ...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

from envaudit.report.intervals import figure_mode, noise_of
from envaudit.schema.result_line import ResultLine, result_lines

KINDS = {
    "cuda_graph": "graph",
    "cuda_events": "eager, device-bound",
    "host-bound": "eager, host-bound",
    "eager only": "eager, no graph figure",
    "wall_clock": "wall clock",
}


def kind_of(line: ResultLine, mode: str) -> str | None:
    """The kind of figure `mode` is in this line, as report/intervals.py's `noise_of` tells it
    (None without a median)."""
    noise = noise_of(line, "graph" if mode == "graph" else "eager")
    return None if noise is None else KINDS.get(noise.kind, noise.kind)


def scatter(paths: list[Path]) -> dict[str, dict[str, float]]:
    """Per kind of figure and per `same card` / `across cards`: groups, median and 90th
    percentile of the standard deviation of log medians. Same card: the runs of a group on
    one GPU (UUID); across cards: the median of each card's runs, between the cards."""
    groups: dict[tuple[str, ...], list[ResultLine]] = defaultdict(list)
    for path in paths:
        for _, line in result_lines(path):
            if line is not None and line.passed and figure_mode(line) is not None:
                key = (line.solution, line.workload.uuid, str(line.context.env))
                groups[(*key, str(line.environment.gpu_name))].append(line)
    by_kind: dict[str, list[float]] = defaultdict(list)
    for runs in groups.values():
        for mode in ("eager", "graph"):
            kinds = {kind_of(line, mode) for line in runs}
            if None in kinds:
                continue
            # a group whose runs disagree on the kind counts as its worst (host-bound first)
            kind = sorted(kinds, key=lambda k: ("host" not in str(k), "no graph" not in str(k)))[0]
            by_card: dict[str, list[float]] = defaultdict(list)
            for line in runs:
                by_card[str(line.environment.gpu_uuid)].append(float(line.median(mode) or 0.0))  # type: ignore[arg-type]
            for medians in by_card.values():
                if len(medians) > 1:
                    by_kind[f"{kind}, same card"].append(_sd(medians))
            if len(by_card) > 1:
                middles = [statistics.median(m) for m in by_card.values()]
                by_kind[f"{kind}, across cards"].append(_sd(middles))
    table = {}
    for kind, sds in sorted(by_kind.items()):
        sds.sort()
        table[kind] = {
            "groups": len(sds),
            "median": statistics.median(sds),
            "p90": sds[min(len(sds) - 1, int(0.9 * len(sds)))],
        }
    return table


def _sd(medians: list[float]) -> float:
    return statistics.stdev(math.log(m) for m in medians)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    table = scatter(args.paths)
    print(f"{'figure':40} {'groups':>6} {'median':>8} {'p90':>8}")
    for kind, row in table.items():
        print(f"{kind:40} {row['groups']:6d} {row['median']:8.2%} {row['p90']:8.2%}")
    if args.json:
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
