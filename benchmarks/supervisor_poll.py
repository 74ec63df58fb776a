"""What the supervisor's look at its worker costs an audit of many short jobs: N copies of the
toy suite's correct solution, audited on the CPU with the host runtime, one job after another.
Each job's worker is forked, runs two toy workloads and exits; the supervisor sees its lines
and its exit only when it next looks (runtime/supervision/supervisor.py, POLL_S), so the command's
wall time per job carries that delay. No GPU is needed: on a GPU the same looks also open the next
job's gate (docs/harness.md, Isolation).

    PYTHONPATH=<source tree> python benchmarks/supervisor_poll.py [--jobs 16] [--runs 1]

Run from the repository's root (the toy suite comes from tests/). Prints the command's wall
time per run; run it once per source tree, alternating, to compare two of them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.getcwd())

from tests.conftest import write_toy_root
from tests.harness.test_faults import SOLUTIONS, write_solution


def write_solutions(folder: Path, jobs: int) -> None:
    copies = {f"correct_{i}": SOLUTIONS["correct"] for i in range(jobs)}
    for name in copies:
        write_solution(folder, name, copies)


def audit_wall_s(folder: Path, out: Path) -> float:
    """One audit of every solution in `folder` on the CPU, into `out`: its wall seconds."""
    argv = [sys.executable, "-m", "envaudit", "audit", "--device", "cpu", "--runtime", "host"]
    argv += ["--data-root", str(folder / "data"), "--solutions-root", str(folder / "solutions")]
    argv += ["--out", str(out), "--suite", "all", "--timeout", "60"]
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"the audit exited {done.returncode}: {done.stdout}{done.stderr}")
    lines = (out / "results.jsonl").read_text().splitlines()
    if not all(json.loads(text)["status"] == "PASSED" for text in lines):
        raise SystemExit("a toy line did not pass")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_toy_root(folder / "data")
        write_solutions(folder / "solutions", args.jobs)
        for run in range(args.runs):
            wall = audit_wall_s(folder, folder / f"out-{run}")
            per_job = 1e3 * wall / args.jobs
            print(f"{args.jobs} jobs: {wall:.2f} s, {per_job:.1f} ms a job", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
