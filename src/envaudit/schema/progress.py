"""The channel between a harness worker and its supervisor: files in one job folder.

Standard library only: the worker writes it inside solution environments and containers, the
supervisor reads it on the host. A pipe's file descriptor cannot cross `docker run`, a folder
mounted into the container can, so every runtime uses the same folder:

- `job.json`: the job, written by the supervisor, with paths as the worker sees them;
- `progress.jsonl`: events appended by the worker, one JSON object per line, flushed at once:
  `env` (environment record and distributions), `ready`, `begin` (a workload starts) and
  `result` (its finished result line), each with the wall-clock time it was sent (`t`: a
  supervisor may read a worker's events long after they were sent). Only the supervisor writes
  the report, so a worker that outlives its supervisor cannot add a line to it;
- `heartbeat`: touched by the supervisor while it watches. A worker whose heartbeat goes stale
  exits at once (`ORPHANED`) and sends nothing more;
- `gate`: made by the supervisor when the job says `gated`: the worker was started while the
  previous job on its GPU was still running or its worker exiting (runtime/supervisor.py,
  Handoff), and does no GPU work of its job (loading the solution included) until the file
  exists. It is made once the previous worker has sent its last line;
- `quiet`: made by the supervisor, for a `gated` job, once the previous worker's process has
  gone: no other job's process is left on the GPU. The worker may check its solution before
  (inputs, reference, validation: nothing there is measured) but measures nothing until the
  file exists (QuietGate).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

JOB_FILE = "job.json"
BYTECODE_CACHE_ENV = "ENVAUDIT_BYTECODE_CACHE"
"""Set in a fork server's environment when it keeps its imports' bytecode in a folder of its
own (runtime/launchers.py, bytecode_cache): its workers then never write there."""
PROGRESS_FILE = "progress.jsonl"
HEARTBEAT_FILE = "heartbeat"
GATE_FILE = "gate"
QUIET_FILE = "quiet"
GATE_POLL_S = 0.002
HEARTBEAT_INTERVAL_S = 0.5
HEARTBEAT_STALE_S = 15.0

CONTEXT_LOST = 3
"""Worker exit status: the CUDA context is unusable; go on in a fresh worker."""
ORPHANED = 4
"""Worker exit status: the supervisor stopped watching; the worker stopped without a word."""


def fork_exit_file(socket_path: Path, pid: int) -> Path:
    """Where a fork server (envaudit.harness.forkserver) writes the exit status of the worker
    it forked as `pid`: beside its socket."""
    return socket_path.parent / f"exit-{pid}"


def touch_heartbeat(job_dir: Path) -> None:
    path = job_dir / HEARTBEAT_FILE
    try:
        os.utime(path)
    except FileNotFoundError:
        path.touch()


def open_gate(job_dir: Path) -> None:
    (job_dir / GATE_FILE).touch()


def open_quiet(job_dir: Path) -> None:
    (job_dir / QUIET_FILE).touch()


class QuietGate:
    """Whether the GPU holds no other job's process yet (`quiet` in the job folder), for a
    worker started gated; with no folder (a job not gated) it is always open. Once seen open it
    stays open without another look."""

    def __init__(self, job_dir: Path | None = None) -> None:
        self.job_dir = job_dir
        self._open = job_dir is None

    def is_open(self) -> bool:
        if not self._open and self.job_dir is not None:
            self._open = (self.job_dir / QUIET_FILE).exists()
        return self._open

    def wait(self) -> float:
        """Wait until it opens; the seconds waited (wait_for_file)."""
        if self.is_open() or self.job_dir is None:
            return 0.0
        waited = wait_for_file(self.job_dir / QUIET_FILE)
        self._open = True
        return waited


def wait_for_file(path: Path) -> float:
    """Wait until the supervisor makes `path`; the seconds waited. The heartbeat watch still
    runs: a supervisor that dies meanwhile ends this process."""
    began = time.perf_counter()
    while not path.exists():
        time.sleep(GATE_POLL_S)
    return time.perf_counter() - began


def supervisor_alive(job_dir: Path) -> bool:
    try:
        age = time.time() - (job_dir / HEARTBEAT_FILE).stat().st_mtime
    except OSError:
        return False
    return age < HEARTBEAT_STALE_S


class ProgressWriter:
    """The worker's end: every event is one flushed line; nothing is sent once orphaned."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir
        self._handle = (job_dir / PROGRESS_FILE).open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def send(self, event: str, **fields: Any) -> None:
        if not supervisor_alive(self.job_dir):
            os._exit(ORPHANED)
        text = json.dumps({"event": event, **fields, "t": time.time()}, allow_nan=True) + "\n"
        with self._lock:
            self._handle.write(text)
            self._handle.flush()

    def wait_for_gate(self) -> float:
        """Wait until the supervisor opens the gate; the seconds waited (wait_for_file)."""
        return wait_for_file(self.job_dir / GATE_FILE)

    def watch_supervisor(self) -> None:
        """Exit the whole process as soon as the heartbeat goes stale (daemon thread)."""

        def watch() -> None:
            while supervisor_alive(self.job_dir):
                time.sleep(HEARTBEAT_INTERVAL_S)
            os._exit(ORPHANED)

        threading.Thread(target=watch, name="envaudit-heartbeat", daemon=True).start()


class ProgressReader:
    """The supervisor's end: complete event lines appended since the last call. The file stays
    open once it exists (the supervisor reads it every few milliseconds); `close` when done."""

    def __init__(self, job_dir: Path) -> None:
        self.path = job_dir / PROGRESS_FILE
        self._handle: BinaryIO | None = None
        self._partial = b""

    def events(self) -> list[dict[str, Any]]:
        if self._handle is None:
            try:
                self._handle = self.path.open("rb")
            except FileNotFoundError:
                return []
        chunk = self._handle.read()
        if not chunk:
            return []
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        found = []
        for raw in complete:
            try:
                event = json.loads(raw)
            except ValueError:
                continue  # a line cut by a killed worker: its workload has no result
            if isinstance(event, Mapping):
                found.append(dict(event))
        return found

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
