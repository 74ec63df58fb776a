"""Run one solution's workload batch in harness worker processes, turning crashes and hangs
into result lines.

Each batch runs in a fresh worker process (`envaudit.harness.worker`) with its own GPU context.
The worker announces every workload before starting it; when it dies (segfault, abort, lost
CUDA context) or overruns the per-workload timeout, the supervisor writes that workload's line
itself (RUNTIME_ERROR or TIMEOUT, with the log tail) and starts a new worker for the workloads
left. The supervisor never imports torch, the harness or the solution: it starts the worker
as a command, so the same supervision works around a container.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envaudit.schema.results import append_line, done_keys, result_line, workloads_by_uuid

DEFAULT_WORKLOAD_TIMEOUT_S = 300.0
DEFAULT_LOAD_TIMEOUT_S = 900.0
LOG_TAIL_CHARS = 3000
CONTEXT_LOST = 3


@dataclass
class BatchResult:
    """What happened to a batch: the workloads that got a line (their statuses are in the
    report), those skipped by --resume, and how many workers it took."""

    written: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)
    workers: int = 0


@dataclass
class _Worker:
    process: subprocess.Popen[bytes]
    progress: int
    log: Path
    buffer: bytes = b""
    env: dict[str, Any] | None = None
    current: str | None = None
    deadline: float = 0.0


def _signal_text(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-LOG_TAIL_CHARS:].decode(errors="replace")


def run_batch(
    job: Mapping[str, Any],
    python: str,
    env: Mapping[str, str] | None = None,
    workload_timeout_s: float = DEFAULT_WORKLOAD_TIMEOUT_S,
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
    resume: bool = False,
) -> BatchResult:
    """Evaluate job["workloads"]; every workload ends with exactly one line in job["report"]."""
    report = Path(job["report"])
    result = BatchResult()
    remaining = list(job["workloads"])
    if resume:
        done = done_keys(report)
        context = job.get("context", {})
        key = (job["solution"], context.get("closure_hash"), context.get("device_id"))
        result.skipped = [u for u in remaining if (key[0], u, key[1], key[2]) in done]
        remaining = [u for u in remaining if u not in result.skipped]
    workloads = workloads_by_uuid(Path(job["workload_file"]))
    logs = report.with_name(report.stem + ".logs") / job["solution"]
    logs.mkdir(parents=True, exist_ok=True)
    while remaining:
        result.workers += 1
        log = logs / f"worker-{int(time.time())}-{result.workers}.log"
        finished = _run_worker(
            {**job, "workloads": remaining},
            python,
            env,
            log,
            workload_timeout_s,
            load_timeout_s,
            workloads,
            result,
        )
        remaining = [u for u in remaining if u not in finished]
    return result


def _run_worker(
    job: Mapping[str, Any],
    python: str,
    env: Mapping[str, str] | None,
    log: Path,
    workload_timeout_s: float,
    load_timeout_s: float,
    workloads: Mapping[str, dict[str, Any]],
    result: BatchResult,
) -> set[str]:
    """Run one worker until it exits or is killed; return the UUIDs that have a line now."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(job, handle)
        job_file = handle.name
    read_fd, write_fd = os.pipe()
    with log.open("wb") as log_handle:
        process = subprocess.Popen(
            [python, "-m", "envaudit.harness.worker", job_file, str(write_fd)],
            stdout=log_handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            pass_fds=(write_fd,),
            env=dict(env) if env is not None else None,
            start_new_session=True,
        )
    os.close(write_fd)
    worker = _Worker(process, read_fd, log, deadline=time.monotonic() + load_timeout_s)
    finished: set[str] = set()
    try:
        outcome = _watch(worker, workload_timeout_s, finished, result)
    finally:
        os.close(read_fd)
        os.unlink(job_file)

    def fail(uuids: list[str], status: str, message: str) -> None:
        for uuid in uuids:
            _write_failure(job, workloads[uuid], worker, status, message)
            result.written.add(uuid)
            finished.add(uuid)

    returncode = worker.process.returncode
    progressed = bool(finished)
    if worker.current is not None:
        if outcome == "timeout":
            fail(
                [worker.current], "TIMEOUT", f"no result within {workload_timeout_s:.0f} s; killed"
            )
        else:
            message = f"worker {_signal_text(returncode)} during this workload"
            fail([worker.current], "RUNTIME_ERROR", message)
    unfinished = [u for u in job["workloads"] if u not in finished]
    if outcome == "load-timeout":
        fail(unfinished, "TIMEOUT", f"solution did not load within {load_timeout_s:.0f} s; killed")
    elif outcome == "exited" and returncode != CONTEXT_LOST and worker.current is None:
        # Died before or between workloads (e.g. while importing the solution), or exited
        # without a line for some workload: never start another worker for those.
        fail(unfinished, "RUNTIME_ERROR", f"worker {_signal_text(returncode)} outside any workload")
    elif outcome == "timeout" and worker.current is None and not progressed:
        fail(unfinished, "TIMEOUT", f"worker hung between workloads for {workload_timeout_s:.0f} s")
    return finished


def _watch(worker: _Worker, timeout_s: float, finished: set[str], result: BatchResult) -> str:
    """Follow the progress pipe; return 'exited', 'timeout' or 'load-timeout'."""
    loading = True
    while True:
        wait = max(0.0, worker.deadline - time.monotonic())
        ready, _, _ = select.select([worker.progress], [], [], min(wait, 1.0))
        if ready:
            chunk = os.read(worker.progress, 65536)
            if not chunk:
                worker.process.wait()
                return "exited"
            worker.buffer += chunk
            while b"\n" in worker.buffer:
                raw, worker.buffer = worker.buffer.split(b"\n", 1)
                kind, _, payload = raw.decode().partition(" ")
                if kind == "env":
                    worker.env = json.loads(payload)
                elif kind == "ready":
                    loading = False
                elif kind == "begin":
                    loading = False
                    worker.current = payload
                    worker.deadline = time.monotonic() + timeout_s
                elif kind == "end":
                    worker.current = None
                    worker.deadline = time.monotonic() + timeout_s
                    finished.add(payload)
                    result.written.add(payload)
        elif time.monotonic() >= worker.deadline:
            _kill(worker.process)
            return "load-timeout" if loading and worker.current is None else "timeout"


def _kill(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _write_failure(
    job: Mapping[str, Any],
    workload: Mapping[str, Any],
    worker: _Worker,
    status: str,
    message: str,
) -> None:
    outcome = {"status": status, "message": message, "log": _tail(worker.log)}
    line = result_line(job, workload, outcome, worker.env, None, 0.0)
    append_line(Path(job["report"]), line)
