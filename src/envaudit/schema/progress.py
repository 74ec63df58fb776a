"""The channel between a harness worker and its supervisor: files in one job folder.

Standard library only: the worker writes it inside solution environments and containers, the
supervisor reads it on the host. A pipe's file descriptor cannot cross `docker run`, a folder
mounted into the container can, so every runtime uses the same folder:

- `job.json`: the job, written by the supervisor, with paths as the worker sees them;
- `progress.jsonl`: events appended by the worker, one JSON object per line, flushed at once:
  `env` (environment record and distributions), `ready`, `begin` (a workload starts),
  `judging`/`judged` (the worker's judge computes or loads a reference: a timeout in between is
  the reference's) and `result` (its finished result line), each with the wall-clock time it
  was sent (`t`: a
  supervisor may read a worker's events long after they were sent). Only the supervisor writes
  the report, so a worker that outlives its supervisor cannot add a line to it;
- `heartbeat`: touched by the supervisor while it watches. A worker whose heartbeat goes stale
  exits at once (`ORPHANED`) and sends nothing more;
- `gate`: made by the supervisor when the job says `gated`: the worker was started while the
  previous job on its GPU was still running or its worker exiting
  (runtime/supervision/supervisor.py, Handoff), and does no GPU work of its job (loading the
  solution included) until the file exists. It is made once the previous worker has sent its last
  line;
- `quiet`: made by the supervisor, for a `gated` job, once the previous worker's process has
  gone: no other job's process is left on the GPU. The worker may check its solution before
  (inputs, reference, validation: nothing there is measured) but measures nothing until the
  file exists (QuietGate);
- `seal`: written by the supervisor before the worker starts, read and deleted by the worker's
  judge before the solution's process may go on (envaudit.harness.judge): the key that seals
  every progress line (an HMAC the supervisor checks, so a line the solution's process writes
  into this folder is told apart and refused) and the reference cache's key (entry names);
- `outputs/`: each judged call's outputs, from the solution's process to the judge.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypedDict

JOB_FILE = "job.json"
BYTECODE_CACHE_ENV = "ENVAUDIT_BYTECODE_CACHE"
"""Set in a fork server's environment when it keeps its imports' bytecode in a folder of its
own (runtime/supervision/launchers.py, bytecode_cache): its workers then never write there."""
PROGRESS_FILE = "progress.jsonl"
HEARTBEAT_FILE = "heartbeat"
GATE_FILE = "gate"
QUIET_FILE = "quiet"
SEAL_FILE = "seal"
OUTPUTS_FOLDER = "outputs"
SEAL_FIELD = "seal"
GATE_POLL_S = 0.002
HEARTBEAT_INTERVAL_S = 0.5
HEARTBEAT_STALE_S = 15.0

CONTEXT_LOST = 3
"""Worker exit status: the CUDA context is unusable; go on in a fresh worker."""
ORPHANED = 4
"""Worker exit status: the supervisor stopped watching; the worker stopped without a word."""


class JobView(TypedDict):
    """job.json: the job as its worker sees it (runtime/jobs.py Job.worker_view, the supervisor
    adds `gated`), typed on both sides of the folder."""

    definition: str
    solution: str
    definition_file: str
    workload_file: str
    data_root: str
    solution_file: str
    workloads: list[str]
    device: str
    options: dict[str, Any]
    reference_cache: str | None
    context: dict[str, Any]
    gated: bool


def read_job(job_dir: Path) -> JobView:
    """The job this worker runs, as the supervisor wrote it."""
    found: JobView = json.loads((job_dir / JOB_FILE).read_text())
    return found


class Seal:
    """The job's keys (SEAL_FILE): one for progress lines, one naming reference cache entries."""

    def __init__(self, progress_key: str, cache_key: str | None = None) -> None:
        self.progress_key = progress_key
        self.cache_key = cache_key

    @classmethod
    def fresh(cls, cache_key: str | None) -> Seal:
        return cls(secrets.token_hex(32), cache_key)

    def write(self, job_dir: Path) -> None:
        """Readable by the worker's user (a container's is not this one); the judge deletes it
        before any solution code runs."""
        path = job_dir / SEAL_FILE
        text = json.dumps({"progress": self.progress_key, "cache": self.cache_key})
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        path.chmod(0o644)


REFERENCE_KEY_SUFFIX = ".key"


def reference_cache_key(directory: Path) -> str:
    """The key that names a reference cache's entries (envaudit.harness.reference): kept beside
    the folder, never in it, so a worker that sees only the folder (a container's mount) can
    open an entry whose name its judge gives it but cannot work a name out for itself. Made on
    first use, readable by this user only."""
    path = directory.with_name(directory.name + REFERENCE_KEY_SUFFIX)
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(32)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as handle:  # mkstemp makes it 0600
        handle.write(key)
    try:
        os.link(tmp, path)  # the first of racing supervisors (or threads) wins; all use its key
    except FileExistsError:
        key = path.read_text().strip()
    finally:
        os.unlink(tmp)
    return key


def seal_reference_folder(directory: Path) -> None:
    """Make a reference cache folder a container's worker can use but not list: write and
    search (0o733) for the others, where this process owns it. Entries of the layout before
    keyed names (a subfolder per definition, entries named by a key anyone can compute) are
    removed: a solution could open those by name."""
    import shutil

    directory.mkdir(parents=True, exist_ok=True)
    for entry in directory.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
    with contextlib.suppress(PermissionError):
        directory.chmod(0o733)


def take_seal(job_dir: Path) -> Seal | None:
    """The job's seal, read and deleted; None for a job started without one."""
    path = job_dir / SEAL_FILE
    try:
        doc = json.loads(path.read_text())
        path.unlink()
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("progress"), str):
        return None
    cache = doc.get("cache")
    return Seal(doc["progress"], cache if isinstance(cache, str) else None)


def seal_of(key: str, text: str) -> str:
    """The HMAC-SHA256 of one progress line's text (without its seal)."""
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()


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

    def __init__(self, job_dir: Path, key: str | None = None) -> None:
        self.job_dir = job_dir
        self.key = key
        self._handle = (job_dir / PROGRESS_FILE).open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._sent = 0

    def send(self, event: str, **fields: Any) -> None:
        if not supervisor_alive(self.job_dir):
            os._exit(ORPHANED)
        with self._lock:
            self._sent += 1
            stamped = {"event": event, **fields, "t": time.time(), "n": self._sent}
            text = json.dumps(stamped, allow_nan=True)
            if self.key is not None:  # the seal goes last, over the text before it
                text = f'{text[:-1]}, "{SEAL_FIELD}": "{seal_of(self.key, text)}"}}'
            text += "\n"
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


MAX_EVENT_BYTES = 64 << 20
"""The longest progress line a reader waits for the end of (a result line is a few KB)."""
MAX_PROGRESS_READ = 16 << 20
"""Bytes a reader takes from the file per call, so one call's memory stays bounded."""
FORGED = "forged"
"""The event a ProgressReader with a key returns for a line without a valid seal."""


class ProgressReader:
    """The supervisor's end: complete event lines appended since the last call. The file stays
    open once it exists (the supervisor reads it every few milliseconds); `close` when done.
    With a key, only sealed lines are events; any other complete line reads as FORGED."""

    def __init__(self, job_dir: Path, key: str | None = None) -> None:
        self.path = job_dir / PROGRESS_FILE
        self.key = key
        self._handle: BinaryIO | None = None
        self._partial = b""
        self._next = 1

    def events(self) -> list[dict[str, Any]]:
        if self._handle is None:
            try:
                self._handle = self.path.open("rb")
            except FileNotFoundError:
                return []
        chunk = self._handle.read(MAX_PROGRESS_READ)
        if not chunk:
            return []
        data = self._partial + chunk
        *complete, self._partial = data.split(b"\n")
        if len(self._partial) > MAX_EVENT_BYTES:  # no event is that long: not the harness's
            self._partial = b""
            complete.append(b"")
        found = []
        for raw in complete:
            try:
                event = json.loads(raw)
            except (ValueError, RecursionError):
                event = None  # a line cut by a killed worker: its workload has no result
            if self.key is not None:
                event = self._unsealed(event)
            if isinstance(event, Mapping):
                found.append(dict(event))
        return found

    def _unsealed(self, sealed: Any) -> dict[str, Any]:
        """The event a sealed line carries, or a FORGED event. The seal is the line's last
        field, over the JSON text of the event without it (json.dumps of what json.loads read
        gives that text back: same key order, same number forms)."""
        assert self.key is not None
        if not isinstance(sealed, dict) or not isinstance(sealed.get(SEAL_FIELD), str):
            return {"event": FORGED}
        event = dict(sealed)
        mac = event.pop(SEAL_FIELD)
        text = json.dumps(event, allow_nan=True)
        if hmac.compare_digest(seal_of(self.key, text), mac) and event.get("n") == self._next:
            self._next += 1  # a sealed line copied and appended again is out of sequence
            return event
        return {"event": FORGED}

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
