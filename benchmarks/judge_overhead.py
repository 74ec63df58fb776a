"""What the judge costs: the same audit run by two source trees side by side, in turns.

Since the judge was split off (docs/harness.md, "What a solution can reach"), a worker is two
processes and every judged call's outputs travel to the judge through a file; the judge draws
the inputs again on a cache miss. This runs `envaudit audit` (`--runtime local` with the
torch-cpu lock on the CPU; pass `--runtime host` on a GPU) of the given
solutions from each tree in the order given (say new, old, old, new), each run twice into its
own folder: cold (references computed) and cached (the same folder again, the references read
from its cache), and prints each run's wall time and the sum of its lines' phases. It also
compares each PASSED line's figure (its eager median; the graph median where there is one)
between the trees: the ratio of the trees' medians over their cached runs, beside the scatter
of each tree's own runs, so "the figures did not move" is a measured statement.

    python benchmarks/judge_overhead.py --old OLD_SRC [--gpu GPU-<uuid> --runtime host]
        [--suite smoke] [--env torch-cpu] [--solution S ...] [--order new,old,old,new]
        [--json OUT.json]

OLD_SRC is the `src` folder of the other tree (`git archive COMMIT src | tar x -C DIR`).
Without --solution: every baseline solution of solutions/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def baselines() -> list[str]:
    found = []
    for path in sorted((REPO / "solutions").glob("*/solution.json")):
        if json.loads(path.read_text()).get("baseline"):
            found.append(path.parent.name)
    return found


def audit(src: Path, out: Path, args: argparse.Namespace, solutions: list[str]) -> float:
    """One audit from the tree at `src` into `out`; its wall seconds."""
    where = ["--gpu", args.gpu] if args.gpu else ["--device", "cpu", "--env", args.env]
    if args.gpu and args.runtime != "host":
        where += ["--env", args.env]
    argv = [sys.executable, "-m", "envaudit", "audit", "--runtime", args.runtime, *where]
    argv += ["--suite", args.suite, "--out", str(out)]
    for name in solutions:
        argv += ["--solution", name]
    env = {**os.environ, "PYTHONPATH": str(src)}
    began = time.perf_counter()
    subprocess.run(argv, cwd=REPO, env=env, capture_output=True, check=False)
    return time.perf_counter() - began


def phases(out: Path) -> dict[str, float]:
    """The sum of every line's phases, and the lines' statuses counted."""
    total: dict[str, float] = defaultdict(float)
    for raw in (out / "results.jsonl").read_text().splitlines():
        line = json.loads(raw)
        total["lines"] += 1
        total["passed"] += line.get("status") == "PASSED"
        for name, seconds in (line.get("phases_s") or {}).items():
            total[name] += float(seconds)
    return dict(total)


def figures(out: Path) -> dict[str, float]:
    """Each PASSED line's figure in ms, keyed "solution workload-label mode" (graph where the
    line has it, else eager)."""
    found: dict[str, float] = {}
    for raw in (out / "results.jsonl").read_text().splitlines():
        line = json.loads(raw)
        timing = line.get("timing") or {}
        if line.get("status") != "PASSED":
            continue
        for mode in ("graph", "eager"):
            median = (timing.get(mode) or {}).get("median_ms")
            if median:
                found[f"{line['solution']} {line['workload']['label']} {mode}"] = float(median)
                break
    return found


def one_run(src: Path, args: argparse.Namespace, solutions: list[str]) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="judge-overhead-"))
    try:
        cold = audit(src, folder, args, solutions)
        cold_phases = phases(folder)
        (folder / "results.jsonl").unlink()
        cached = audit(src, folder, args, solutions)
        return {
            "cold_s": cold,
            "cached_s": cached,
            "cold": cold_phases,
            "cached": phases(folder),
            "figures_ms": figures(folder),
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def compare_figures(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per line: new/old ratio of the trees' medians, and each tree's own spread (max/min of
    its runs), which is the noise the ratio has to beat before it means anything."""
    rows = []
    keys = set.intersection(*(set(r["figures_ms"]) for r in runs))
    for key in sorted(keys):
        of = {t: [r["figures_ms"][key] for r in runs if r["tree"] == t] for t in ("new", "old")}
        spread = max(max(v) / min(v) for v in of.values())
        ratio = statistics.median(of["new"]) / statistics.median(of["old"])
        rows.append({"line": key, "new_over_old": ratio, "own_spread": spread, **of})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--gpu")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--env", default="torch-cpu")
    parser.add_argument("--runtime", default="local", help="local on the CPU; host on a GPU")
    parser.add_argument("--suite", default="smoke")
    parser.add_argument("--solution", action="append", default=[])
    parser.add_argument("--order", default="new,old,old,new")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    trees = {"new": REPO / "src", "old": args.old.resolve()}
    solutions = args.solution or baselines()
    runs: list[dict[str, Any]] = []
    for label in args.order.split(","):
        run = {"tree": label, **one_run(trees[label], args, solutions)}
        runs.append(run)
        cached = run["cached"]
        print(
            f"{label}: cold {run['cold_s']:.1f} s, cached {run['cached_s']:.1f} s;"
            f" cached lines {cached.get('lines', 0):.0f} ({cached.get('passed', 0):.0f} PASSED),"
            f" reference {cached.get('reference', 0):.2f} s,"
            f" validation {cached.get('validation', 0):.2f} s,"
            f" recheck {cached.get('recheck', 0):.2f} s",
            flush=True,
        )
    ran = {r["tree"] for r in runs}
    for kind in ("cold_s", "cached_s") if ran == set(trees) else ():
        by = {t: statistics.median(r[kind] for r in runs if r["tree"] == t) for t in trees}
        print(
            f"median {kind}: new {by['new']:.1f}, old {by['old']:.1f},"
            f" new/old {by['new'] / by['old']:.3f}"
        )
    rows = compare_figures(runs) if ran == set(trees) else []
    for row in rows:
        beyond = not (1 / row["own_spread"] <= row["new_over_old"] <= row["own_spread"])
        print(
            f"{row['line']}: new/old {row['new_over_old']:.3f},"
            f" own runs' spread {row['own_spread']:.3f}{'  BEYOND' if beyond else ''}"
        )
    if rows:
        ratios = sorted(row["new_over_old"] for row in rows)
        outside = sum(
            not (1 / r["own_spread"] <= r["new_over_old"] <= r["own_spread"]) for r in rows
        )
        print(
            f"figures: {len(rows)} lines, new/old median {statistics.median(ratios):.3f}"
            f" (range {ratios[0]:.3f}-{ratios[-1]:.3f}); {outside} beyond their own runs' spread"
        )
    if args.json:
        document = {"solutions": solutions, "runs": runs, "figures": rows}
        args.json.write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
