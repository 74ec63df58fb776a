"""What one process for every job would give: the floor of a worker reused across an audit.

docs/harness.md ("Isolation") gives every (solution, device) job a process of its own, and issue
16's second target (a cached `dev` re-audit within 1.2x of its timing phases) meets that design's
fixed costs once per job. This measures the other end: the same solutions and workloads, evaluated
one solution after another in ONE process, with the harness's own functions (load, inputs,
reference, validation, timing, re-check), the same reference cache, JIT folders, order and
device. Nothing isolates one solution from the next there, so it is not a mode of envaudit; it
is how far worker reuse could go at best, side by side with the real cached re-audit.

    python benchmarks/shared_worker.py --gpu GPU-<uuid> --out DIR [--suite dev]
        [--solution S ...] [--rounds 2] [--json OUT.json]

First a cold audit into DIR fills the reference cache and the JIT folders; then each round runs
the cached re-audit (`envaudit audit`, one process per job) and the one-process pass, their
order swapped every round. The one-process pass is a fresh interpreter started the way the
fork server is (bytecode cache included), that imports torch, the harness and every preload
module, makes its CUDA context beside the preload as a worker does, and then runs the jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from audit_profile import DEFAULT_SOLUTIONS, run_audit

from envaudit.runtime.jit import jit_cache_folder, jit_environment
from envaudit.runtime.jobs import RunRequest, plan_job
from envaudit.runtime.scheduling.audit import REFERENCE_CACHE
from envaudit.runtime.supervision.launchers import bytecode_cache
from envaudit.schema.options import EvalOptions
from envaudit.schema.results import read_lines

TIMING_PHASES = ("eager", "graph")


def timing_s(lines: Sequence[Mapping[str, Any]]) -> float:
    """The lines' timing phases (eager and graph: warm-up, capture, measured iterations)."""
    return sum(float((ln.get("phases_s") or {}).get(p, 0.0)) for ln in lines for p in TIMING_PHASES)


def job_views(
    args: argparse.Namespace, out: Path, order: list[str], contexts: dict[str, Any]
) -> list[dict[str, Any]]:
    """Each job as its worker would read it, with the JIT folder the audit gave it."""
    views = []
    for name in order:
        req = RunRequest(
            solution=name,
            suite=args.suite,
            gpu=args.gpu,
            device=None if args.gpu else "cpu",
            evaluation=EvalOptions(graph_timing=bool(args.gpu)),
            reference_cache=out / REFERENCE_CACHE,
            report=out / "shared.jsonl",
        )
        job = plan_job(req, "host")
        view = job.worker_view(str, job.workloads)
        context = contexts[name]
        folder = jit_cache_folder(context.get("env"), context.get("closure_hash"))
        views.append({**view, "jit_env": jit_environment(str(folder))})
    return views


def run_shared(args: argparse.Namespace, jobs_file: Path, result_file: Path) -> dict[str, Any]:
    """The one-process pass in a fresh interpreter: its record, with the wall seconds seen from
    here and those before its first statement and after its last."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": args.gpu or ""}
    flags, env = bytecode_cache(sys.executable, env)
    command = [sys.executable, *flags, __file__, "--child", str(jobs_file), str(result_file)]
    launched = time.time()
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env)
    wall = time.perf_counter() - started
    record = json.loads(result_file.read_text())
    inside = record["import_s"] + record["ready_s"] + record["jobs_s"]
    record["interpreter_start_s"] = record.pop("began_at") - launched
    record["exit_s"] = wall - inside - record["interpreter_start_s"]
    record["wall_s"] = wall
    return record


def child(jobs_file: Path, result_file: Path) -> None:
    """Every job of `jobs_file` in this process, one after another; it leaves without the
    interpreter's teardown, as a worker does."""
    began_at, began = time.time(), time.perf_counter()
    import torch

    from envaudit.harness.context import context_beside
    from envaudit.harness.environment import SmClock, environment_record
    from envaudit.harness.evaluate import EvalContext, evaluate_workload
    from envaudit.harness.judge import Judge, LocalJudge
    from envaudit.harness.preload import import_modules
    from envaudit.harness.reference import ReferenceCache
    from envaudit.harness.solution import load_solution, source_files
    from envaudit.schema.results import workloads_by_uuid

    imported = time.perf_counter()
    views = json.loads(jobs_file.read_text())
    device = torch.device(views[0]["device"])
    making = context_beside(device)
    import_modules()
    if making is not None:
        making.join()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.init()
    clock = SmClock(device)
    environment_record(device)
    ready = time.perf_counter()
    lines: list[dict[str, Any]] = []
    for view in views:
        os.environ.update(view["jit_env"])
        loading = time.perf_counter()
        solution_json = json.loads(Path(view["solution_file"]).read_text())
        folder = Path(view["solution_file"]).parent
        solution = load_solution(solution_json, source_files(solution_json, folder))
        load_s = time.perf_counter() - loading
        by_uuid = workloads_by_uuid(Path(view["workload_file"]))
        ctx = EvalContext(
            definition=json.loads(Path(view["definition_file"]).read_text()),
            solution=solution,
            root=Path(view["data_root"]),
            device=device,
            judge=LocalJudge(
                Path(view["reference_cache"]),
                Judge(
                    definition=json.loads(Path(view["definition_file"]).read_text()),
                    workloads=by_uuid,
                    root=Path(view["data_root"]),
                    device=device,
                    cache=ReferenceCache(Path(view["reference_cache"])),
                ),
            ),
            options=EvalOptions.from_record(view["options"]),
            clock=clock,
        )
        for index, uuid in enumerate(view["workloads"]):
            start = time.perf_counter()
            outcome = evaluate_workload(ctx, by_uuid[uuid])
            phases = dict(outcome.get("phases_s") or {})
            if index == 0:
                phases["solution_load"] = load_s
            lines.append(
                {
                    "solution": view["solution"],
                    "workload": uuid,
                    "status": outcome["status"],
                    "wall_s": time.perf_counter() - start + (load_s if index == 0 else 0.0),
                    "phases_s": phases,
                }
            )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    done = time.perf_counter()
    record = {
        "began_at": began_at,
        "import_s": imported - began,
        "ready_s": ready - imported,
        "jobs_s": done - ready,
        "lines": lines,
    }
    result_file.write_text(json.dumps(record))
    sys.stdout.flush()
    os._exit(0)


def audit_lines(path: Path) -> list[dict[str, Any]]:
    return [line for _, line in read_lines(path) if line is not None]


def summary(
    name: str, wall: float, lines: Sequence[Mapping[str, Any]], inner: float | None
) -> dict[str, Any]:
    timing = timing_s(lines)
    outside: dict[str, float] = {}
    for line in lines:
        spent = float(line.get("wall_s") or 0.0) - timing_s([line])
        outside[str(line["solution"])] = outside.get(str(line["solution"]), 0.0) + spent
    return {
        "run": name,
        "wall_s": wall,
        "jobs_s": inner,
        "timing_s": timing,
        "wall_over_timing": wall / timing if timing else None,
        "jobs_over_timing": inner / timing if inner and timing else None,
        "statuses": sorted({str(line.get("status")) for line in lines}),
        "outside_timing_by_solution_s": outside,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", help="GPU UUID (default: the CPU, for a trial)")
    parser.add_argument("--out", help="audit folder (emptied first)")
    parser.add_argument("--solution", action="append", help="default: six dev-suite solutions")
    parser.add_argument("--suite", default="dev")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]))
        return 0
    if not args.out:
        parser.error("--out is required")
    args.runtime, args.over = "host", None
    args.solution = args.solution or list(DEFAULT_SOLUTIONS)
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    run_audit(args, out, out.parent / f"{out.name}.timeline.jsonl")
    cold = audit_lines(out / "results.jsonl")
    os.replace(out / "results.jsonl", out / "results.cold.jsonl")
    order = list(dict.fromkeys(str(line["solution"]) for line in cold))
    contexts = {str(line["solution"]): line.get("context") or {} for line in cold}
    jobs_file = out / "shared-jobs.json"
    jobs_file.write_text(json.dumps(job_views(args, out, order, contexts)))
    runs = []
    for r in range(args.rounds):
        for which in ("audit", "shared") if r % 2 == 0 else ("shared", "audit"):
            if which == "audit":
                _, wall = run_audit(args, out, out.parent / f"{out.name}.timeline.jsonl")
                kept = out / f"results.audit{r}.jsonl"
                os.replace(out / "results.jsonl", kept)
                runs.append(summary(f"audit{r}", wall, audit_lines(kept), None))
            else:
                record = run_shared(args, jobs_file, out / f"shared{r}.json")
                runs.append(
                    summary(f"shared{r}", record["wall_s"], record["lines"], record["jobs_s"])
                )
                runs[-1].update({k: v for k, v in record.items() if k not in runs[-1]})
    for run in runs:
        inner = ""
        if run["jobs_s"]:
            start = (
                "start {interpreter_start_s:.2f} + imports {import_s:.2f}"
                " + preload and context {ready_s:.2f} s, exit {exit_s:.2f} s"
            )
            ratio = f"{run['jobs_over_timing']:.2f}x"
            inner = f", jobs {run['jobs_s']:.2f} s ({ratio}); " + start.format(**run)
        print(
            f"{run['run']:8} wall {run['wall_s']:6.2f} s, timing phases {run['timing_s']:.2f} s,"
            f" wall/timing {run['wall_over_timing']:.2f}{inner}, {run['statuses']}"
        )
        parts = run["outside_timing_by_solution_s"].items()
        print("          lines outside timing: " + ", ".join(f"{k[:14]} {v:.2f}" for k, v in parts))
    if args.json:
        Path(args.json).write_text(json.dumps({"order": order, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
