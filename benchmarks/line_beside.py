"""Whether a worker starting beside a measured line moves that line's figures (GPU only).

On the forked runtimes the audit starts the next job's worker while the current job measures
(docs/harness.md, Isolation). A worker's start makes a CUDA context, records the environment
and, for solutions that import a library first (FA4's `flash_attn.cute`, FlashInfer's GDN
modules), imports it before its gate; some of those imports initialise CUDA for seconds.
benchmarks/context_overlap.py asks this of the calibration kernels; this asks it of real
solutions' lines, through the real command: each round runs `envaudit audit` of the given
solutions once per condition (rotating order), with a churner beside it:

- quiet: nothing else on the GPU;
- context: the churner forks children back to back, each making its CUDA context and tiny
  launch (as a worker's start does) and exiting;
- import: each child also imports the `--import` modules after its context, as a staged worker
  does before its gate.

Children are forked from a churner that has imported torch without touching CUDA (as the host
runtime's fork server has), and stamp their spans; each line's measuring window comes from the
supervisor's timeline (its `result` mark and the line's wall time), so the table says how much
of each line overlapped a child's import rather than assuming it.

    python benchmarks/line_beside.py --gpu GPU-<uuid> --out DIR --solution S [--solution ...]
        [--suite dev] [--import flash_attn.cute ...] [--rounds 6] [--json OUT.json]

Per line and condition: the median over rounds of the graph and eager medians, their range,
the ratio to quiet, iterations and the share of the line's window during which a child was
importing.

Its answer for FA4's dense attention on the H200 (s57, docs/lab/audit-throughput.md): no. The line
read either of two figures in every condition, quiet included; benchmarks/graph_modes.py then found
the two to be the kernel before and after the board's power controller acts.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from envaudit.runtime.timeline import TIMELINE_ENV
from envaudit.schema.results import read_lines

CONDITIONS = ("quiet", "context", "import")


def churn(stamps: Path, stop: Path, imports: tuple[str, ...]) -> None:
    """Fork children one after the other until `stop` exists; each appends
    `began context_made imports_done` (wall seconds) to `stamps`."""
    import torch

    while not stop.exists():
        pid = os.fork()
        if pid == 0:
            began = time.time()
            if torch.cuda.is_available():
                torch.cuda.set_device(0)
                torch.ones(1, device="cuda").add_(1).item()
            made = time.time()
            for module in imports:
                importlib.import_module(module)
            with stamps.open("a") as handle:
                handle.write(f"{began} {made} {time.time()}\n")
            os._exit(0)
        os.waitpid(pid, 0)


def read_spans(path: Path) -> list[tuple[float, float, float]]:
    if not path.exists():
        return []
    return [tuple(map(float, line.split())) for line in path.read_text().splitlines()]  # type: ignore[misc]


def covered(window: tuple[float, float], spans: list[tuple[float, float]]) -> float:
    a, b = window
    inside = sum(max(0.0, min(b, d) - max(a, c)) for c, d in spans)
    return inside / (b - a) if b > a else 0.0


def line_windows(timeline: Path, lines: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Each line's [end - wall, end], its end the supervisor's `result` mark for it (the marks of
    one job come in the order of its lines)."""
    ends: dict[str, list[float]] = {}
    for raw in timeline.read_text().splitlines():
        mark = json.loads(raw)
        if mark["event"] == "result":
            ends.setdefault(mark["job"], []).append(mark["t"])
    seen: dict[str, int] = {}
    windows = []
    for line in lines:
        job = line["solution"]
        index = seen.get(job, 0)
        seen[job] = index + 1
        end = ends.get(job, [])[index] if index < len(ends.get(job, [])) else float("nan")
        windows.append((end - float(line.get("wall_s") or 0.0), end))
    return windows


def run_once(args: argparse.Namespace, condition: str, run_dir: Path) -> list[dict[str, Any]]:
    run_dir.mkdir(parents=True)
    stamps, stop, timeline = run_dir / "stamps.txt", run_dir / "stop", run_dir / "timeline.jsonl"
    churner = None
    if condition != "quiet":
        imports = args.imports if condition == "import" else []
        command = [sys.executable, __file__, "--churn", str(stamps), str(stop), *imports]
        churner = subprocess.Popen(command)
    audit = [sys.executable, "-m", "envaudit", "audit", "--runtime", "host", "--suite", args.suite]
    audit += ["--out", str(run_dir / "audit")]
    audit += ["--gpu", args.gpu] if args.gpu else ["--device", "cpu"]
    for solution in args.solution:
        audit += ["--solution", solution]
    environ = dict(os.environ, **{TIMELINE_ENV: str(timeline)})
    done = subprocess.run(audit, env=environ, check=False, stdout=subprocess.DEVNULL)
    if churner is not None:
        stop.touch()
        churner.wait()
    if done.returncode != 0:
        raise SystemExit(f"{condition}: envaudit audit exited {done.returncode}")
    lines = [line for _, line in read_lines(run_dir / "audit" / "results.jsonl") if line]
    spans = read_spans(stamps)
    imports_spans = [(made, end) for _, made, end in spans]
    context_spans = [(began, made) for began, made, _ in spans]
    rows = []
    for line, window in zip(lines, line_windows(timeline, lines), strict=True):
        timing = line.get("timing") or {}
        row: dict[str, Any] = {
            "condition": condition,
            "solution": line["solution"],
            "workload": (line.get("workload") or {}).get("label"),
            "status": line["status"],
            "window_s": window[1] - window[0],
            "importing_share": covered(window, imports_spans),
            "context_share": covered(window, context_spans),
        }
        for mode in ("eager", "graph"):
            figures = timing.get(mode) or {}
            row[mode] = {k: figures.get(k) for k in ("median_ms", "iterations", "stop")}
        rows.append(row)
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    keyed: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        keyed.setdefault((row["solution"], row["workload"]), {}).setdefault(
            row["condition"], []
        ).append(row)
    table = []
    for (solution, workload), by_condition in keyed.items():
        entry: dict[str, Any] = {"solution": solution, "workload": workload}
        quiet: dict[str, float] = {}
        for condition in CONDITIONS:
            runs = by_condition.get(condition, [])
            if not runs:
                continue
            cell: dict[str, Any] = {
                "runs": len(runs),
                "importing_share": statistics.median(r["importing_share"] for r in runs),
            }
            for mode in ("eager", "graph"):
                values = [r[mode]["median_ms"] for r in runs if r[mode]["median_ms"]]
                if not values:
                    continue
                median = statistics.median(values)
                quiet.setdefault(mode, median)
                cell[mode] = {
                    "median_ms": median,
                    "range_ms": [min(values), max(values)],
                    "over_quiet": median / quiet[mode],
                    "iterations": [r[mode]["iterations"] for r in runs],
                    "per_run_ms": values,
                }
            entry[condition] = cell
        table.append(entry)
    return table


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--churn":
        churn(Path(sys.argv[2]), Path(sys.argv[3]), tuple(sys.argv[4:]))
        return 0
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", help="default: the CPU (a trial of the script itself)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--solution", action="append", required=True)
    parser.add_argument("--suite", default="dev")
    parser.add_argument("--import", dest="imports", action="append", default=[])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    run_once(args, "quiet", args.out / "warm")  # compiles and caches; not counted
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
        for condition in order:
            found = run_once(args, condition, args.out / f"r{r}-{condition}")
            rows += found
            for row in found:
                graph, eager = row["graph"], row["eager"]
                print(
                    f"r{r} {condition:7} {row['solution']} {row['workload']}"
                    f" graph {graph['median_ms']} ({graph['iterations']} its)"
                    f" eager {eager['median_ms']} ({eager['iterations']} its)"
                    f" importing {row['importing_share']:.0%} context {row['context_share']:.0%}",
                    flush=True,
                )
    table = summarise(rows)
    for entry in table:
        cells = []
        for condition in CONDITIONS:
            cell = entry.get(condition, {})
            graph = cell.get("graph")
            if graph:
                cells.append(
                    f"{condition} {graph['median_ms']:.4f} ms x{graph['over_quiet']:.4f}"
                    f" [{graph['range_ms'][0]:.4f}-{graph['range_ms'][1]:.4f}]"
                )
        print(f"{entry['solution']} {entry['workload']} graph: " + " | ".join(cells))
    if args.json:
        record = {"imports": args.imports, "suite": args.suite, "rows": rows, "table": table}
        args.json.write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
