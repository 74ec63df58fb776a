"""The child process that evaluates one solution on a batch of workloads.

It is two processes (envaudit.harness.judge): this one, the judge, forks the solution's
process first thing and keeps the expected answers, the job's seal and the progress file to
itself; everything below that loads, calls and times the solution runs in the other one
(solution_main), whose events reach the supervisor only through the judge.

`python -m envaudit.harness.worker JOB_DIR`. It reads `JOB_DIR/job.json` and reports through
`JOB_DIR/progress.jsonl` (envaudit.schema.progress): its environment, `begin` before each
workload, so the supervisor knows which workload was in flight if this process dies or hangs,
and each finished result line, which the supervisor appends to the report. After an error that
poisons the CUDA context (an illegal address, a device-side assert), it exits with CONTEXT_LOST
so the supervisor continues in a fresh process. It exits (ORPHANED) as soon as the supervisor's
heartbeat goes stale. A `gated` job was started while the previous job on its GPU was still
running or its worker exiting: it makes its CUDA context and records the environment, then
waits for the gate (the previous worker has sent its last line) before loading the solution or
touching its GPU further, and times nothing before the GPU is quiet (that worker's process has
gone: envaudit.schema.progress). First of all, while the driver makes its CUDA context on
another thread (envaudit.harness.context), it imports the library modules the solution's
sources name that its first call would import, and those its entry module imports before any
code of its own (envaudit.harness.preload): a staged worker does both beside the previous job.
"""

# ruff: noqa: E402 - the clock below times the imports after it
from __future__ import annotations

import threading
import time

IMPORTS_BEGAN = time.perf_counter()

import faulthandler
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from envaudit.harness.context import context_beside
from envaudit.harness.environment import SmClock, environment_record
from envaudit.harness.evaluate import EvalContext, evaluate_workload
from envaudit.harness.judge import (
    Judge,
    Link,
    LinkClosed,
    RemoteJudge,
    adopt_orphans,
    end_descendants,
    exit_like,
    fork_solution_process,
    seal_judge,
)
from envaudit.harness.preload import preload_for
from envaudit.harness.reference import ReferenceCache
from envaudit.harness.solution import (
    NoCompilerHere,
    SolutionLoadError,
    hash_sources,
    load_solution,
    source_files,
    unsupported_device,
)
from envaudit.schema.options import EvalOptions
from envaudit.schema.progress import (
    BYTECODE_CACHE_ENV,
    CONTEXT_LOST,
    GATE_FILE,
    OUTPUTS_FOLDER,
    JobView,
    ProgressWriter,
    QuietGate,
    read_job,
    take_seal,
    wait_for_file,
)
from envaudit.schema.results import result_line, workloads_by_uuid
from envaudit.schema.sources import leading_imports

IMPORTS_S = time.perf_counter() - IMPORTS_BEGAN


def entry_imports(solution: Mapping[str, Any], files: Mapping[str, bytes] | None) -> list[str]:
    """The libraries the solution's entry module imports before any code of its own
    (envaudit.schema.sources), for the worker to import before its gate; none when its sources
    cannot be read (the load then says why)."""
    if files is None:
        return []
    entry = str((solution.get("spec") or {}).get("entry_point", "")).split("::")[0]
    return list(leading_imports(files, entry))  # none where the entry is not among the files


def context_alive(device: torch.device) -> bool:
    if device.type != "cuda":
        return True
    try:
        torch.cuda.synchronize(device)
        torch.ones(1, device=device).add_(1).item()
        return True
    except Exception:
        return False


def main(job_dir: Path) -> int:
    """Split into the judge (this process) and the solution's process (envaudit.harness.judge),
    before anything else happens."""
    faulthandler.enable()  # a segfault prints the Python stack into the log the line quotes
    split = fork_solution_process()
    if split.is_judge:
        assert split.solution_pid is not None
        return judge_main(job_dir, split.link, split.solution_pid)
    split.link.receive()  # released: the seal is read and gone, the judge sealed
    return solution_main(job_dir, split.link)


RELAYED = {
    "env": ("environment", "distributions", "startup"),
    "ready": ("gate_wait_s", "build"),
    "begin": ("uuid",),
}
"""The events the judge relays from the solution's process, and the fields of each."""


class Relay:
    """The solution process's way to the supervisor: every event goes through the judge,
    which alone writes (and seals) the job's progress."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def send(self, event: str, **fields: Any) -> None:
        self.link.send("event", event=event, fields=fields)


def judge_main(job_dir: Path, link: Link, child: int) -> int:
    """The judge: takes the seal, lets the solution's process go, then relays its events,
    judges its outputs and settles each result line, until that process ends."""
    seal = take_seal(job_dir)
    seal_judge()
    adopt_orphans()
    # Everything the judge judges by is read before the solution's process may go on: it can
    # write the job folder (job.json among its files), never what the judge already holds.
    job = read_job(job_dir)
    definition = json.loads(Path(job["definition_file"]).read_text())
    by_uuid = workloads_by_uuid(Path(job["workload_file"]))
    solution_json = json.loads(Path(job["solution_file"]).read_text())
    options = EvalOptions.from_record(job.get("options"))
    try:
        own_hash: str | None = hash_sources(
            source_files(solution_json, Path(job["solution_file"]).parent)
        )
    except SolutionLoadError:
        own_hash = None
    outputs_dir = job_dir / OUTPUTS_FOLDER
    outputs_dir.mkdir(exist_ok=True)
    outputs_dir.chmod(0o700)
    progress = ProgressWriter(job_dir, seal.progress_key if seal else None)
    link.send("go")
    progress.watch_supervisor()
    device = torch.device(job["device"])
    making = context_beside(device)
    cache_dir = job.get("reference_cache")
    judge = Judge(
        definition=definition,
        workloads={u: by_uuid[u] for u in job["workloads"]},
        root=Path(job["data_root"]),
        device=device,
        cache=ReferenceCache(
            Path(cache_dir) if cache_dir else None, seal.cache_key if seal else None
        ),
        strict=options.strict_diagnostic,
        solution=solution_json,
        timed=not options.validation_only,
        solution_pid=child,
    )
    if making is not None:
        making.join()
    if device.type == "cuda":
        torch.cuda.set_device(device)
    _serve(link, judge, progress, job, own_hash, options.validation_only, outputs_dir)
    _, status = os.waitpid(child, 0)
    end_descendants()
    exit_like(status)
    return 1


def _serve(
    link: Link,
    judge: Judge,
    progress: ProgressWriter,
    job: JobView,
    own_hash: str | None,
    validation_only: bool,
    outputs_dir: Path,
) -> None:
    """The judge's side of the link until the solution's process closes it: judge its outputs,
    relay its events, settle each result line it announces."""
    env: dict[str, Any] = {}
    while True:
        try:
            message = link.receive()
        except LinkClosed:
            return
        kind = message.get("kind")
        if kind == "judge" and isinstance(message.get("request"), dict):
            if "timing" in message["request"]:
                link.send("verdict", verdict=_timing_step(judge, message["request"], progress))
                continue
            progress.send("judging", uuid=str(message["request"].get("uuid")))
            verdict = judge.verdict(message["request"], outputs_dir)
            progress.send("judged")
            link.send("verdict", verdict=verdict)
        elif kind == "event":
            event, given = str(message.get("event")), message.get("fields")
            given = given if isinstance(given, dict) else {}
            fields = {k: given[k] for k in RELAYED.get(event, ()) if k in given}
            if event == "env":
                env = dict(fields.get("environment") or {})
            if event == "begin":
                judge.begin(str(fields.get("uuid")))
            if event in RELAYED:
                progress.send(event, **fields)
        elif kind == "result":
            uuid = str(message.get("uuid"))
            if uuid not in judge.workloads:
                continue
            outcome = message.get("outcome")
            outcome = dict(outcome) if isinstance(outcome, dict) else {"status": "RUNTIME_ERROR"}
            outcome = judge.settle(uuid, outcome, validation_only)
            seconds = message.get("seconds")
            seconds = float(seconds) if isinstance(seconds, int | float) else 0.0
            line = result_line(job, judge.workloads[uuid], outcome, env, own_hash, seconds)
            progress.send("result", uuid=uuid, line=line)


def _timing_step(
    judge: Judge, request: Mapping[str, Any], progress: ProgressWriter
) -> dict[str, Any]:
    """One step of the timing handshake; only `finish`, which computes references, tells the
    supervisor that the judge is at work (the other steps answer at once)."""
    judging = request.get("timing") == "finish"
    if judging:
        progress.send("judging", uuid=str(request.get("uuid")))
    verdict = judge.timing(request)
    if judging:
        progress.send("judged")
    return verdict


def solution_main(job_dir: Path, link: Link) -> int:
    """The solution's process: everything a worker did before the judge was split off, except
    computing references, judging, and writing progress."""
    progress = Relay(link)
    job = read_job(job_dir)
    device = torch.device(job["device"])
    making = context_beside(device)
    solution_dir = Path(job["solution_file"]).parent
    solution_json = json.loads(Path(job["solution_file"]).read_text())
    files: dict[str, bytes] | None = None
    unreadable: SolutionLoadError | None = None
    try:
        files = source_files(solution_json, solution_dir)
    except SolutionLoadError as exc:
        unreadable = exc
    preload_s = preload_for(solution_dir, entry_imports(solution_json, files))
    clock = _start_device(device, making, preload_s, progress)
    gate_wait = wait_for_file(job_dir / GATE_FILE) if job.get("gated") else 0.0
    definition = json.loads(Path(job["definition_file"]).read_text())
    by_uuid = workloads_by_uuid(Path(job["workload_file"]))
    workloads = [by_uuid[u] for u in job["workloads"]]
    start = time.perf_counter()
    unsupported = unsupported_device(solution_json["spec"], device)
    if unsupported is not None:
        outcome = {"status": "UNSUPPORTED_DEVICE", "message": unsupported}
        return _settle_all(link, workloads, outcome, start)
    if os.environ.get(BYTECODE_CACHE_ENV):
        # envaudit's bytecode folder (runtime/supervision/launchers.py, bytecode_cache) holds the
        # harness's and the libraries' bytecode, written above; nothing the solution imports
        # goes there
        sys.dont_write_bytecode = True
    try:
        if unreadable is not None or files is None:
            raise unreadable or SolutionLoadError("no sources")
        solution = load_solution(solution_json, files, job_dir)
    except SolutionLoadError as exc:
        status = "UNSUPPORTED_DEVICE" if isinstance(exc, NoCompilerHere) else "COMPILE_ERROR"
        return _settle_all(link, workloads, {"status": status, "message": str(exc)}, start)
    ctx = EvalContext(
        definition=definition,
        solution=solution,
        root=Path(job["data_root"]),
        device=device,
        judge=RemoteJudge(job_dir / OUTPUTS_FOLDER, link),
        options=EvalOptions.from_record(job.get("options")),
        clock=clock,
        quiet=QuietGate(job_dir if job.get("gated") else None),
    )
    built = solution.build.record() if solution.build is not None else None
    progress.send("ready", gate_wait_s=gate_wait, **({"build": built} if built else {}))
    return _evaluate_all(ctx, link, progress, workloads)


def _start_device(
    device: torch.device, making: threading.Thread | None, preload_s: float, progress: Relay
) -> SmClock:
    """Finish making the device's context, record the environment (sent as the `env` event)
    and what the start cost; the GPU's clock reader, kept open for the whole job."""
    began = time.perf_counter()
    if making is not None:
        making.join()
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.init()
    cuda_init = time.perf_counter() - began  # what the preload did not hide
    clock = SmClock(device)  # NVML stays open: the record's and every later reading's init is free
    env, dists = environment_record(device)
    startup = {
        "worker_imports": IMPORTS_S,
        "worker_cuda_init": cuda_init,
        "worker_env_record": time.perf_counter() - began - cuda_init,
    }
    if preload_s:
        startup["worker_preload"] = preload_s
    progress.send("env", environment=env, distributions=dists, startup=startup)
    return clock


def _send_result(
    link: Link, workload: Mapping[str, Any], outcome: Mapping[str, Any], started: float
) -> None:
    seconds = time.perf_counter() - started
    link.send("result", uuid=workload["uuid"], outcome=dict(outcome), seconds=seconds)


def _settle_all(
    link: Link, workloads: list[dict[str, Any]], outcome: Mapping[str, Any], started: float
) -> int:
    """One outcome for every workload (the solution cannot run at all here)."""
    for workload in workloads:
        _send_result(link, workload, outcome, started)
    return 0


def _evaluate_all(
    ctx: EvalContext, link: Link, progress: Relay, workloads: list[dict[str, Any]]
) -> int:
    """Each workload in turn; CONTEXT_LOST when a failure took the CUDA context with it."""
    for workload in workloads:
        progress.send("begin", uuid=workload["uuid"])
        start = time.perf_counter()
        outcome = evaluate_workload(ctx, workload)
        _send_result(link, workload, outcome, start)
        if outcome["status"] == "RUNTIME_ERROR" and not context_alive(ctx.device):
            return CONTEXT_LOST
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    return 0


def exit_now(code: int) -> None:
    """Leave without the interpreter's teardown. Every result is already written and flushed,
    and the supervisor waits for the process to end before it starts the next job: tearing down
    the CUDA context, torch's caches and modules would only make the GPU wait."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main(Path(sys.argv[1])))
