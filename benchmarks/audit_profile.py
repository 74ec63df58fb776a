"""Where an audit's wall time goes: one `dev` audit of several solutions on a GPU, then the
same audit again with everything cached (reference outputs, JIT caches), split by phase.

Every result line carries `phases_s` (the harness's own clock around each phase of the
workload, and the supervisor's for the worker's start and the solution's load), and its
timings carry the wall time of their warm-up and of their measured iterations; this script only
runs the audit and adds those up, so the profile is of the real command, not of a copy of it.

    python benchmarks/audit_profile.py [--gpu GPU-<uuid>] --out DIR [--solution S ...]
        [--runtime host] [--json OUT.json] [--linger SECONDS]

With --linger, two more cached runs with ENVAUDIT_SERVER_IDLE_S set: the first leaves its
fork server lingering, the second (`rejoined`) joins it, as a re-audit in an edit-audit loop
would.

Phases, per run: worker start, split into the process (interpreter or container start), the
harness's imports (torch first), the CUDA context and the environment record; the wait at its
gate for the GPU's previous worker to go (runtime/supervision/supervisor.py, Handoff); solution
load; input generation; reference (computed on the cold run, read from the cache on the second);
validation (prepare, the unjudged warm-up call, the judged call(s), comparison); timing set-up
(input copies); eager and graph timing, each split into warm-up (graph: capture and warm-up),
measured iterations and what judging the timed calls adds to them (the judge's set-up, the fresh
draws, the copies into the slots, the windows' messages); the check of the picked timed calls
(timed_check); clock read (NVML); post-timing re-check; and what lies outside every worker
(environment checks, scheduling, result writing, process exits).

Target (issue 16): the cached run's total at most 1.2x its timing phases (eager + graph).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from envaudit.harness.witness import TIMING_MODES
from envaudit.runtime.supervision.launchers import SERVER_IDLE_ENV
from envaudit.runtime.timeline import TIMELINE_ENV
from envaudit.schema.results import read_lines

DEFAULT_SOLUTIONS = (
    "gemm_bf16_n6144_k4096-torch",
    "gdn_decode_qk4_v8_d128_k_last-triton",
    "moe_router_mm_sqrtsoftplus_e128_h4096_topk6-triton",
    "qsa_index_h64_d128_ps64_topk2048-triton",
    "sparse_gqa_decode_h32_kv8_d128_ps64_topk2048-triton",
    "neighborhood_attention_1d_k13_h8_d64-flex",
)
ORDER = (
    "worker_process",
    "worker_imports",
    "worker_cuda_init",
    "worker_env_record",
    "worker_preload",
    "worker_gate_wait",
    "solution_load",
    "worker_staged",
    "inputs",
    "reference",
    "validation",
    "quiet_wait",
    "timing_setup",
    "eager_warmup",
    "eager_measure",
    "eager_judge_setup",
    "eager_fresh_draws",
    "eager_slot_copies",
    "eager_handshakes",
    "graph_warmup",
    "graph_measure",
    "graph_judge_setup",
    "graph_fresh_draws",
    "graph_slot_copies",
    "graph_handshakes",
    "chained_graph_warmup",
    "chained_graph_measure",
    "chained_graph_judge_setup",
    "chained_graph_fresh_draws",
    "chained_graph_slot_copies",
    "chained_graph_handshakes",
    "timed_check",
    "clock_read",
    "recheck",
    "scale_probe",
    "outside_workers",
)

INSIDE_MEASURE = ("fresh_draws", "slot_copies", "handshakes")
"""The parts of judged timing (harness/timed_calls.py, WINDOW_COSTS) that a line's phases count
apart from its mode's phase but its `measure_wall_ms` holds: the measured iterations are the
rest. The judge's set-up happens before the first batch, outside the measurement."""

STARTUP = ("worker_start", "worker_preload", "worker_gate_wait", "solution_load")
"""The start-up phases of a worker's first line that follow one another (worker_start holds
the imports, context and environment record)."""

OUTSIDE = (
    "cli_start",
    "audit_setup",
    "job_setup",
    "worker_exit",
    "worker_cleanup",
    "job_cleanup",
    "cli_finish",
)


def run_audit(
    args: argparse.Namespace, out: Path, timeline: Path, linger_s: float = 0.0
) -> tuple[float, float]:
    """Run the audit command once, its supervisor marking its timeline (runtime/timeline.py),
    its fork server lingering linger_s after it; (the wall time at its start, its wall
    seconds)."""
    command = [sys.executable, "-m", "envaudit", "audit", "--suite", args.suite, "--out", str(out)]
    command += ["--runtime", args.runtime, "--timeout", "600"]
    command += ["--over", args.over] if args.over else []
    command += ["--gpu", args.gpu] if args.gpu else ["--device", "cpu"]
    for solution in args.solution or DEFAULT_SOLUTIONS:
        command += ["--solution", solution]
    timeline.unlink(missing_ok=True)
    environ = {**os.environ, TIMELINE_ENV: str(timeline), SERVER_IDLE_ENV: str(linger_s)}
    launched = time.time()
    started = time.perf_counter()
    done = subprocess.run(command, check=False, env=environ)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"the audit exited {done.returncode}: {' '.join(command)}")
    return launched, wall


def outside_split(timeline: Path, launched: float, wall: float) -> dict[str, float]:
    """The supervisor's side, from its marks: the command's start (interpreter, imports) up to
    the audit, the audit's set-up (plans, environments), each job's set-up before its worker
    starts, each worker's exit after its last line, the supervisor's clean-up after it, and the
    command's end after the last job. A worker left in its GPU's handoff exits while the next
    job starts: its exit counts only up to the handoff. A job staged beside the previous one
    (its worker started early) counts its set-up from its turn (`job_begin`) to the moment its
    supervisor follows the staged worker (`worker_adopted`)."""
    marks = [json.loads(text) for text in timeline.read_text().splitlines() if text.strip()]
    first = {m["event"]: m["t"] for m in reversed(marks) if not m["job"]}
    split: dict[str, float] = defaultdict(float)
    split["cli_start"] = first.get("audit_start", launched) - launched
    split["audit_setup"] = first.get("jobs_ready", launched) - first.get("audit_start", launched)
    split["cli_finish"] = launched + wall - first.get("audit_end", launched + wall)
    last: dict[tuple[str, str], float] = {}
    for m in marks:
        job, event, t = m["job"], m["event"], m["t"]
        if event in ("worker_launch", "worker_adopted") and (job, "worker_finished") not in last:
            split["job_setup"] += t - last[(job, "job_begin")]
        elif event in ("worker_exited", "worker_handed_off") and last.get(
            (job, "result"), 0
        ) > last.get((job, "worker_launch"), 0):
            split["worker_exit"] += t - last[(job, "result")]
        elif event == "worker_finished":
            split["worker_cleanup"] += t - last[(job, "worker_exited")]
        elif event == "job_end":
            ended = max(last.get((job, e), 0.0) for e in ("worker_finished", "worker_handed_off"))
            split["job_cleanup"] += t - ended if ended else 0.0
        last[(job, event)] = t
    return dict(split)


def annotate_timeline(timeline: Path, lines: Iterable[Mapping[str, Any]]) -> None:
    """Give every mark of the timeline the environment that made it: a job's marks the
    `context` (runtime, env, closure hash) of that job's result lines, the audit's own marks the
    context its lines share (none where they differ). The supervisor marks only times."""
    contexts: dict[str, dict[str, Any]] = {}
    for line in lines:
        context = line.get("context") or {}
        contexts[str(line.get("solution"))] = {
            key: context.get(key) for key in ("runtime", "env", "closure_hash")
        }
    shared = next(iter(contexts.values())) if len(set(map(str, contexts.values()))) == 1 else None
    marks = [json.loads(text) for text in timeline.read_text().splitlines() if text.strip()]
    text = "".join(
        json.dumps({**mark, "context": contexts.get(mark["job"], shared)}) + "\n" for mark in marks
    )
    tmp = timeline.with_name(timeline.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, timeline)


def phase_totals(lines: Iterable[Mapping[str, Any]], total_s: float) -> dict[str, float]:
    """Seconds per phase over all lines; the timing phases split into warm-up and measurement.
    A worker staged beside the previous job (runtime/supervision/supervisor.py) spent
    `worker_staged` of its start-up while that job ran: it counts as a negative phase, so the
    phases and the time outside the workers still add up to the command's wall time."""
    totals: dict[str, float] = defaultdict(float)
    inside = 0.0
    for line in lines:
        phases = dict(line.get("phases_s") or {})
        inside += float(line.get("wall_s") or 0.0)
        startup = sum(phases.get(n, 0.0) for n in STARTUP)
        beside = min(phases.pop("worker_staged", 0.0), startup)
        inside += startup - beside
        totals["worker_staged"] -= beside
        timing = line.get("timing") or {}
        for mode in TIMING_MODES:
            spent = phases.pop(mode, 0.0)
            stats = timing.get(mode) or {}
            measure = (stats.get("measure_wall_ms") or 0.0) / 1e3
            within = sum(phases.get(f"{mode}_{part}", 0.0) for part in INSIDE_MEASURE)
            totals[f"{mode}_measure"] += measure - within
            totals[f"{mode}_warmup"] += spent + within - measure
        for name, spent in phases.items():
            totals[name] += spent
    parts = ("worker_imports", "worker_cuda_init", "worker_env_record")
    totals["worker_process"] = totals.pop("worker_start", 0.0) - sum(totals[p] for p in parts)
    totals["outside_workers"] = total_s - inside
    return dict(totals)


def later_lines(lines: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What one more workload costs: over the lines that are not the first of their solution's
    job (no worker start, solution load or first JIT-loading call of their own), the wall time
    of their workloads against the warm-up and measurement inside them, with the same split by
    phase (`unclocked`: the line's wall time outside every clocked phase) and by solution. Once
    an audit has many workloads per solution, its ratio tends to this one."""
    seen: set[str] = set()
    count, wall, timing = 0, 0.0, 0.0
    phases: dict[str, float] = defaultdict(float)
    by_solution: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for line in lines:
        solution = str(line.get("solution"))
        if solution in seen:
            line_wall = float(line.get("wall_s") or 0.0)
            line_timing = 0.0
            for stats in (line.get("timing") or {}).values():
                if isinstance(stats, Mapping):
                    ms = (stats.get("warmup_wall_ms") or 0.0) + (
                        stats.get("measure_wall_ms") or 0.0
                    )
                    line_timing += ms / 1e3
            clocked = dict(line.get("phases_s") or {})
            for name, spent in clocked.items():
                phases[name] += spent
            phases["unclocked"] += line_wall - sum(clocked.values())
            count, wall, timing = count + 1, wall + line_wall, timing + line_timing
            mine = by_solution[solution]
            mine["lines"] += 1
            mine["wall_s"] += line_wall
            mine["timing_s"] += line_timing
        seen.add(solution)
    return {
        "lines": count,
        "wall_s": wall,
        "timing_s": timing,
        "wall_over_timing": wall / timing if timing else 0.0,
        "phases_s": dict(phases),
        "solutions": {name: dict(values) for name, values in by_solution.items()},
    }


def profile(args: argparse.Namespace) -> dict[str, Any]:
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Any] = {}
    for name, linger_s in run_plan(args.linger):
        timeline = out.parent / f"{out.name}.timeline.{name}.jsonl"
        launched, wall = run_audit(args, out, timeline, linger_s)
        kept = out / f"results.{name}.jsonl"
        os.replace(out / "results.jsonl", kept)
        lines = [line for _, line in read_lines(kept) if line is not None]
        annotate_timeline(timeline, lines)
        totals = phase_totals(lines, wall)
        timing = sum(totals.get(k, 0.0) for k in ORDER if k.startswith(TIMING_MODES))
        measure = sum(totals.get(f"{mode}_measure", 0.0) for mode in TIMING_MODES)
        runs[name] = {
            "wall_s": wall,
            "lines": len(lines),
            "statuses": sorted({str(line.get("status")) for line in lines}),
            "reference_cached": sum(1 for line in lines if line.get("reference_cached")),
            "phases_s": totals,
            "outside_s": outside_split(timeline, launched, wall),
            "timing_s": timing,
            "measure_s": measure,
            "wall_over_timing": wall / timing if timing else None,
            "wall_over_measure": wall / measure if measure else None,
            "later_lines": later_lines(lines),
        }
    runs.pop("starts-server", None)
    return {"solutions": list(args.solution or DEFAULT_SOLUTIONS), "suite": args.suite, **runs}


def run_plan(linger_s: float) -> list[tuple[str, float]]:
    """The runs, each with its server's idle time: cold and cached with the audit's own fork
    server; with linger_s, a cached run that leaves its server lingering (not reported) and one
    more that joins it (`rejoined`: a re-audit without the server's imports and preload)."""
    plan = [("cold", 0.0), ("cached", 0.0)]
    if linger_s > 0:
        plan += [("starts-server", linger_s), ("rejoined", linger_s)]
    return plan


def print_profile(record: Mapping[str, Any]) -> None:
    names = [name for name in ("cold", "cached", "rejoined") if name in record]
    runs = [record[name] for name in names]
    print(f"{'phase':18}" + "".join(f" {name + ' s':>11} {'share':>6}" for name in names))
    for phase in ORDER:
        values = [run["phases_s"].get(phase, 0.0) for run in runs]
        if any(values):
            cells = "".join(
                f" {v:11.2f} {v / run['wall_s']:6.1%}" for v, run in zip(values, runs, strict=True)
            )
            print(f"{phase:18}{cells}")
        if phase == "outside_workers":
            for part in OUTSIDE:
                cells = "".join(f" {run['outside_s'].get(part, 0.0):11.2f} {'':6}" for run in runs)
                print(f"  {part:16}{cells}")
    print(f"{'total (command)':18}" + "".join(f" {run['wall_s']:11.2f} {'':6}" for run in runs))
    for name, run in zip(names, runs, strict=True):
        print(
            f"{name}: {run['lines']} lines {run['statuses']}, {run['reference_cached']} references"
            f" from the cache; wall / timing phases {_ratio(run['wall_over_timing'])},"
            f" wall / measured iterations {_ratio(run['wall_over_measure'])}"
        )
        later = run["later_lines"]
        print(
            f"  {later['lines']} lines after their job's first: {later['wall_s']:.2f} s,"
            f" timing phases {later['timing_s']:.2f} s, ratio {later['wall_over_timing']:.2f}"
        )
        spent = sorted(later.get("phases_s", {}).items(), key=lambda item: -item[1])
        print("    by phase: " + ", ".join(f"{n} {v:.2f} s" for n, v in spent if v >= 0.005))
        for solution, values in later.get("solutions", {}).items():
            ratio = values["wall_s"] / values["timing_s"] if values["timing_s"] else 0.0
            print(
                f"    {solution}: {values['lines']:.0f} lines, {values['wall_s']:.2f} s,"
                f" timing phases {values['timing_s']:.2f} s, ratio {ratio:.2f}"
            )


def _ratio(value: float | None) -> str:
    return "n/a (nothing timed)" if value is None else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", help="GPU UUID (default: the CPU, for a trial)")
    parser.add_argument("--out", required=True, help="audit folder (emptied first)")
    parser.add_argument("--solution", action="append", help="default: six dev-suite solutions")
    parser.add_argument("--runtime", default="host")
    parser.add_argument("--over", help="container runtimes: the image over this imported stack")
    parser.add_argument("--suite", default="dev")
    parser.add_argument("--json", help="also write the profile here")
    parser.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="seconds: also a cached re-audit that joins a lingering fork server",
    )
    args = parser.parse_args()
    record = profile(args)
    print_profile(record)
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
