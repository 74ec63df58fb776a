"""Run one solution's workload batch in harness workers, turning crashes and hangs into result
lines.

Each batch runs in a fresh worker (`envaudit.harness.worker`) with its own GPU context, started
by a launcher (an interpreter here, or a container). The worker announces every workload before
starting it and sends each finished line through the job folder (envaudit.schema.progress); the
supervisor appends the lines to the report, so only it ever writes there. When the worker dies
(segfault, abort, lost CUDA context) or overruns the per-workload timeout, the supervisor writes
that workload's line itself (RUNTIME_ERROR or TIMEOUT, with the log tail) and starts a new
worker for the workloads left. The supervisor never imports torch, the harness or the solution.

In an audit, one Handoff per GPU lets the next job's worker start while the last one exits:
a worker that has sent its last line is left to end on its own (an H200's CUDA context takes
0.1-0.2 s to tear down, a container longer to stop and be removed), while the next job is
planned and its worker starts, imports and makes its CUDA context. That worker waits at its
gate (envaudit.schema.progress) until the one before it has sent its last line, then checks its
solution while that one exits, and waits for the GPU to be quiet (the one before gone) before it
measures: no job measures beside another job's process. One that does not go within the
workload timeout is killed.
The next job's worker can also be started earlier, beside the previous job itself
(`stage_batch`, a StagedWorker): it makes its context and records its environment while the
previous job measures, waits at its gate, and is followed from where it stands once the
previous worker has sent its last line. A context made by another process does not move what
the harness measures (benchmarks/context_overlap.py, docs/lab/audit-throughput.md); its solution is
not even loaded before the gate opens.

Job folders live under one root; each is held by an exclusive file lock for the supervisor's
lifetime, so the folders a killed supervisor left behind are recognised (their lock is free) and
removed by the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envaudit.errors import EnvauditError, write_failed
from envaudit.runtime.jobs import Job
from envaudit.runtime.supervision.launchers import Launcher, WorkerHandle
from envaudit.runtime.timeline import mark
from envaudit.schema.paths import output_folder
from envaudit.schema.progress import (
    CONTEXT_LOST,
    FORGED,
    HEARTBEAT_INTERVAL_S,
    JOB_FILE,
    JobView,
    ProgressReader,
    Seal,
    open_gate,
    open_quiet,
    reference_cache_key,
    touch_heartbeat,
)
from envaudit.schema.results import (
    append_line,
    done_keys,
    line_identity,
    logs_folder,
    record_distributions,
    result_line,
    workloads_by_uuid,
)
from envaudit.settings import cache_root

DEFAULT_WORKLOAD_TIMEOUT_S = 300.0
DEFAULT_LOAD_TIMEOUT_S = 900.0
LOG_TAIL_CHARS = 3000
OWNER_LOCK = "owner.lock"
MAKING_PREFIX = "making-"
MAKING_STALE_S = 3600.0
"""A folder still under its making name this long after it was made lost its maker."""
POLL_S = 0.005
"""How often a supervisor looks at its worker (its events, its exit, the GPU's previous
worker for the quiet gate). Each look is a few system calls; at 50 ms, the look that saw a job's
last line and the one that saw its worker gone added 25 ms each on average to every handoff
between two jobs on a GPU (docs/lab/audit-throughput.md, s43)."""
HEARTBEAT_TOUCH_S = 0.25
"""How often the supervisor renews its heartbeat (a worker gives up after HEARTBEAT_STALE_S)."""


@dataclass
class BatchResult:
    """What happened to a batch: the workloads that got a line (their statuses are in the
    report), those skipped by --resume, and how many workers it took."""

    written: set[str] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)
    workers: int = 0


@dataclass
class _Watch:
    """What the supervisor learnt from one worker's progress events."""

    env: dict[str, Any] | None = None
    current: str | None = None
    loading: bool = True
    finished: set[str] = field(default_factory=set)
    launched: float = field(default_factory=time.time)
    """Wall-clock time of the launch; events carry the time they were sent (`t`)."""
    env_at: float | None = None
    gate_opened: float | None = None
    staged: bool = False
    """Started beside the previous job (StagedWorker): the seconds from its launch to its gate
    opening ran beside that job, and its first line says so (`worker_staged`)."""
    startup: dict[str, float] = field(default_factory=dict)
    build: dict[str, Any] | None = None
    """A cuda/cpp solution's build record (the `ready` event's), for the job's first line."""
    """Seconds from the launch to the worker's environment record (process and container
    start, imports) and from there to its solution loaded; added to the worker's first line."""
    seal: Seal | None = None
    """The job's keys (envaudit.schema.progress): only lines sealed with them are events."""
    forged: bool = False
    """A line in the progress file did not carry the seal: written by the solution's process."""
    judging: bool = False
    """The judge is computing or loading a reference (between `judging` and `judged`)."""


@dataclass
class _Leaving:
    handle: WorkerHandle
    log: Path
    job: str
    deadline: float
    exited: bool = False


@dataclass
class Handoff:
    """The workers of one GPU in an audit, one after the other: the last one left to exit while
    the next starts (module docstring)."""

    leaving: _Leaving | None = None
    launched: threading.Event = field(default_factory=threading.Event)
    """Set once the current job's worker has started: the next job's is started after it."""

    def leave(self, handle: WorkerHandle, log: Path, job: str, overdue_s: float) -> None:
        self.wait()
        self.leaving = _Leaving(handle, log, job, time.monotonic() + overdue_s)
        mark("worker_handed_off", job)

    def gone(self) -> bool:
        """Whether no worker is still leaving (the GPU is free): the one left has exited, or was
        killed once overdue. What remains of it (a container's log and the container) is
        collected by `reap`, once the next worker's quiet gate has opened."""
        left = self.leaving
        if left is None or left.exited:
            return True
        if left.handle.poll() is None:
            if time.monotonic() < left.deadline:
                return False
            with contextlib.suppress(Exception):
                left.handle.kill()
        mark("worker_reaped", left.job)
        left.exited = True
        return True

    def reap(self) -> None:
        left = self.leaving
        if left is not None and left.exited:
            left.handle.finish(left.log)
            self.leaving = None

    def wait(self) -> None:
        while not self.gone():
            time.sleep(POLL_S)
        self.reap()


@dataclass
class StagedWorker:
    """A job's first worker, started gated beside the previous job on its GPU (module
    docstring). Until a supervisor follows it, a thread of its own keeps its heartbeat fresh."""

    uuids: list[str]
    skipped: list[str]
    folder: Path
    log: Path
    view: JobView
    handle: WorkerHandle
    watch: _Watch
    held: contextlib.ExitStack
    """Holds the job folder (job_folder) until the worker is done with."""
    _followed: threading.Event = field(default_factory=threading.Event)

    def keep_alive(self) -> None:
        def beat() -> None:
            while not self._followed.wait(HEARTBEAT_INTERVAL_S):
                touch_heartbeat(self.folder)

        threading.Thread(target=beat, name="envaudit-staged-heartbeat", daemon=True).start()

    def followed(self) -> None:
        """A supervisor follows the worker now (and owns what becomes of it)."""
        self._followed.set()

    def discard(self) -> None:
        """Kill the worker and give its folder back, unless a supervisor has followed it (a job
        that will not run: the audit was interrupted, its GPU stayed held)."""
        if self._followed.is_set():
            return
        self._followed.set()
        with contextlib.suppress(Exception):
            self.handle.kill()
        with contextlib.suppress(Exception):
            self.handle.finish(self.log)
        self.held.close()


def default_jobs_root() -> Path:
    return cache_root() / "jobs"


def _signal_text(returncode: int | None) -> str:
    if returncode is None:
        return "ended"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


def _tail(path: Path) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - LOG_TAIL_CHARS))
            data = handle.read()
    except OSError:
        return ""
    return data.decode(errors="replace")


def remove_stale_job_folders(root: Path) -> int:
    """Remove job folders whose supervisor is gone (their owner lock is free), and folders left
    half made (job_folder) long ago."""
    removed = 0
    for folder in sorted(root.glob("job-*")) if root.is_dir() else []:
        try:
            handle = (folder / OWNER_LOCK).open("a")
        except OSError:
            continue
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live supervisor holds it
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    for folder in sorted(root.glob(MAKING_PREFIX + "*")) if root.is_dir() else []:
        with contextlib.suppress(OSError):
            if time.time() - folder.stat().st_mtime > MAKING_STALE_S:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    return removed


@contextlib.contextmanager
def job_folder(root: Path) -> Iterator[Path]:
    """A fresh job folder, held for as long as the block runs and removed after it. It is made
    and locked under a name that remove_stale_job_folders passes over, then renamed: under its
    final name it is never seen without its owner's lock (another thread or process clearing
    stale folders would take it for one)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        remove_stale_job_folders(root)
        making = Path(tempfile.mkdtemp(prefix=MAKING_PREFIX, dir=root))
    except OSError as exc:
        raise EnvauditError(
            f"cannot make a job folder under {root}: {exc.strerror or exc}",
            hint="set ENVAUDIT_CACHE to a folder you can write to",
        ) from None
    making.chmod(0o777)  # a container's non-root worker writes its progress here
    handle = (making / OWNER_LOCK).open("a")
    folder = making
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        folder = root / ("job-" + making.name.removeprefix(MAKING_PREFIX))
        making.rename(folder)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        handle.close()


LOG_CAP_BYTES = 8 << 20
"""The most a worker's log holds: a solution printing 20 MB a call must not fill the disk."""
LOG_HEAD_BYTES = 1 << 20
"""What is kept from a log's start when it is cut (the start, where a failure usually begins)."""


def cap_log(log: Path) -> None:
    """Keep a worker's log under LOG_CAP_BYTES (checked while it runs): past it, everything
    after its first LOG_HEAD_BYTES is cut, a note says how much, and the worker writes on after
    the note (its log is opened for appending by every launcher)."""
    try:
        size = log.stat().st_size
    except OSError:
        return
    if size <= LOG_CAP_BYTES:
        return
    note = (
        f"\n[envaudit: {size - LOG_HEAD_BYTES} bytes of the worker's output were cut here;"
        f" a worker's log is kept under {LOG_CAP_BYTES} bytes]\n"
    )
    with contextlib.suppress(OSError), open(log, "r+b") as handle:
        handle.truncate(LOG_HEAD_BYTES)
        handle.seek(0, os.SEEK_END)
        handle.write(note.encode())


def unique_log(folder: Path, index: int) -> Path:
    """A worker log that no other worker writes: created here, exclusively, under a name of the
    time, this process and the worker number (a counter settles two in one second). The logs
    folder and the solution's folder in it must be real folders: a planted link is refused."""
    try:
        output_folder(folder.parent)
        output_folder(folder)
    except OSError as exc:
        raise write_failed(folder, exc, "make the worker logs' folder") from None
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    for attempt in range(1000):
        extra = f"-{attempt}" if attempt else ""
        path = folder / f"worker-{stamp}-{os.getpid()}-{index}{extra}.log"
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644))
        except FileExistsError:
            continue
        return path
    raise EnvauditError(f"no free worker log name in {folder}")


def _left_to_run(job: Job, resume: bool) -> tuple[list[str], list[str]]:
    """(the job's workloads to run, those skipped because --resume finds their line)."""
    remaining = list(job.workloads)
    if not resume:
        return remaining, []
    done = done_keys(job.report)
    context = job.context
    skipped = [
        u
        for u in remaining
        if line_identity(job.solution, u, context.env, context.closure_hash, context.device_id)
        in done
    ]
    return [u for u in remaining if u not in skipped], skipped


def stage_batch(
    job: Job, launcher: Launcher, resume: bool = False, jobs_root: Path | None = None
) -> StagedWorker | None:
    """Start the job's first worker, gated, to be followed by run_batch once the previous job
    on its GPU has handed its worker off; None when --resume leaves nothing to run."""
    remaining, skipped = _left_to_run(job, resume)
    if not remaining:
        return None
    held = contextlib.ExitStack()
    try:
        folder = held.enter_context(job_folder(jobs_root or default_jobs_root()))
        log = unique_log(logs_folder(job.report) / job.solution, 1)
        view, watch, handle = _start_worker(job, remaining, launcher, folder, log, staged=True)
    except BaseException:
        held.close()
        raise
    staged = StagedWorker(remaining, skipped, folder, log, view, handle, watch, held)
    staged.keep_alive()
    return staged


def run_batch(
    job: Job,
    launcher: Launcher,
    workload_timeout_s: float = DEFAULT_WORKLOAD_TIMEOUT_S,
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
    resume: bool = False,
    jobs_root: Path | None = None,
    handoff: Handoff | None = None,
    staged: StagedWorker | None = None,
) -> BatchResult:
    """Evaluate job.workloads; every workload ends with exactly one line in job.report. With a
    handoff, the first worker waits for the GPU's previous one to go, and the last is left in
    the handoff to exit while the next job starts; a staged first worker (stage_batch) is
    followed from where it stands."""
    result = BatchResult()
    if staged is not None:
        remaining, result.skipped = list(staged.uuids), list(staged.skipped)
    else:
        remaining, result.skipped = _left_to_run(job, resume)
    workloads = workloads_by_uuid(job.workload_file)
    logs = logs_folder(job.report) / job.solution
    timeouts = (workload_timeout_s, load_timeout_s)
    while remaining:
        result.workers += 1
        first, staged = staged, None
        with contextlib.ExitStack() as held:
            if first is not None:
                held.enter_context(first.held)
                folder, log = first.folder, first.log
            else:
                folder = held.enter_context(job_folder(jobs_root or default_jobs_root()))
                log = unique_log(logs, result.workers)
            finished = _run_worker(
                job, remaining, launcher, folder, log, timeouts, workloads, handoff, first
            )
        result.written |= finished
        remaining = [u for u in remaining if u not in finished]
    return result


def _start_worker(
    job: Job,
    uuids: list[str],
    launcher: Launcher,
    folder: Path,
    log: Path,
    gated: bool = False,
    staged: bool = False,
) -> tuple[JobView, _Watch, WorkerHandle]:
    """Write the job for a worker on `uuids` into its folder and launch it; a staged one is
    always gated. (The job as the worker sees it, the watch of its events, its handle.)"""
    view = job.worker_view(launcher.seen_as, uuids, gated=gated or staged)
    try:  # in the cache (ENVAUDIT_CACHE): a full disk there is named, with its free space
        (folder / JOB_FILE).write_text(json.dumps(view))
        cache_key = reference_cache_key(job.reference_cache) if job.reference_cache else None
        seal = Seal.fresh(cache_key)
        seal.write(folder)
        touch_heartbeat(folder)
    except OSError as exc:
        raise write_failed(folder / JOB_FILE, exc, "write the worker's job folder") from None
    watch = _Watch(staged=staged, seal=seal)
    mark("worker_staged" if staged else "worker_launch", job.solution)
    return view, watch, launcher.start(folder, log)


def _run_worker(
    job: Job,
    uuids: list[str],
    launcher: Launcher,
    folder: Path,
    log: Path,
    timeouts: tuple[float, float],
    workloads: Mapping[str, dict[str, Any]],
    handoff: Handoff | None = None,
    staged: StagedWorker | None = None,
) -> set[str]:
    """Run one worker (or follow the staged one) until it exits or is killed, or, with a
    handoff, until it has sent a line for every workload (it is then left in the handoff to
    exit); return the UUIDs that have a line now."""
    workload_timeout_s, load_timeout_s = timeouts
    if staged is not None:
        view, watch, handle, gated = staged.view, staged.watch, staged.handle, True
        staged.followed()
        mark("worker_adopted", job.solution)
    else:
        gated = handoff is not None and not handoff.gone()
        view, watch, handle = _start_worker(job, uuids, launcher, folder, log, gated=gated)
    if handoff is not None:
        handoff.launched.set()
    left = False
    try:
        outcome, returncode = _follow(
            job,
            handle,
            folder,
            watch,
            timeouts,
            handoff=handoff,
            gated=gated,
            uuids=set(uuids),
            log=log,
        )
        if outcome == "done" and handoff is not None:
            handoff.leave(handle, log, job.solution, workload_timeout_s)
            left = True
        else:
            mark("worker_exited", job.solution)
    finally:
        if not left:
            with contextlib.suppress(Exception):
                handle.kill()
            handle.finish(log)
            cap_log(log)
    if not left:
        mark("worker_finished", job.solution)

    def fail(failed: list[str], status: str, message: str) -> None:
        for uuid in failed:
            outcome_fields = {"status": status, "message": message, "log": _tail(log)}
            line = result_line(view, workloads[uuid], outcome_fields, watch.env, None, 0.0)
            append_line(job.report, line)
            watch.finished.add(uuid)

    if outcome == "forged":
        message = (
            "a line without the harness's seal was written into the worker's progress file:"
            " written by the solution's process, not by the harness; the worker was killed"
        )
        fail([u for u in uuids if u not in watch.finished], "RUNTIME_ERROR", message)
        return watch.finished
    if watch.current is not None:
        if outcome == "timeout" and watch.judging:
            message = (
                f"the definition's reference did not return within {workload_timeout_s:.0f} s"
                " (the solution's call had returned; the harness was computing the reference)"
            )
            fail([watch.current], "WORKLOAD_ERROR", message)
        elif outcome == "timeout":
            message = f"no result within {workload_timeout_s:.0f} s; killed"
            fail([watch.current], "TIMEOUT", message)
        else:
            message = f"worker {_signal_text(returncode)} during this workload"
            fail([watch.current], "RUNTIME_ERROR", message)
    unfinished = [u for u in uuids if u not in watch.finished]
    if outcome == "load-timeout":
        fail(unfinished, "TIMEOUT", f"solution did not load within {load_timeout_s:.0f} s; killed")
    elif outcome == "exited" and returncode != CONTEXT_LOST and watch.current is None:
        # Died before or between workloads (e.g. while importing the solution), or exited
        # without a line for some workload: never start another worker for those.
        fail(unfinished, "RUNTIME_ERROR", f"worker {_signal_text(returncode)} outside any workload")
    elif outcome == "timeout" and watch.current is None and not watch.finished:
        fail(unfinished, "TIMEOUT", f"worker hung between workloads for {workload_timeout_s:.0f} s")
    return watch.finished


def _follow(
    job: Job,
    handle: WorkerHandle,
    folder: Path,
    watch: _Watch,
    timeouts: tuple[float, float],
    *,
    handoff: Handoff | None = None,
    gated: bool = False,
    uuids: frozenset[str] | set[str] = frozenset(),
    log: Path | None = None,
) -> tuple[str, int | None]:
    """Relay the worker's events until it ends; ('exited' | 'timeout' | 'load-timeout', status).
    A gated worker's gate opens at once (the previous worker on its GPU, if any, has sent its
    last line: it is in the handoff), its `quiet` once that worker is gone. With a handoff,
    ('done', None) comes as soon as every one of `uuids` has a line, the worker still running."""
    workload_timeout_s, load_timeout_s = timeouts
    if gated:
        open_gate(folder)
        watch.gate_opened = time.time()
    key = watch.seal.progress_key if watch.seal is not None else None
    with contextlib.closing(ProgressReader(folder, key)) as reader:
        deadline = time.monotonic() + load_timeout_s
        touched = 0.0
        while True:
            if time.monotonic() - touched >= HEARTBEAT_TOUCH_S:
                touch_heartbeat(folder)
                touched = time.monotonic()
                if log is not None:
                    cap_log(log)
            if gated and (handoff is None or handoff.gone()):
                open_quiet(folder)
                gated = False
                if handoff is not None:
                    handoff.reap()
            returncode = handle.poll()
            for event in reader.events():  # after poll: an ended worker's last events are read
                if _apply(job, event, watch):
                    deadline = time.monotonic() + workload_timeout_s
                if watch.forged:
                    handle.kill()
                    return "forged", handle.poll()
            if returncode is not None:
                return "exited", returncode
            if handoff is not None and uuids <= watch.finished:
                return "done", None
            if time.monotonic() >= deadline:
                handle.kill()
                loading = watch.loading and watch.current is None
                return ("load-timeout" if loading else "timeout"), handle.poll()
            time.sleep(POLL_S)


def _apply(job: Job, event: Mapping[str, Any], watch: _Watch) -> bool:
    """Act on one event; True when it restarts the workload clock."""
    kind = event.get("event")
    if kind == FORGED:
        watch.forged = True
        return False
    sent = event.get("t")
    at = float(sent) if isinstance(sent, int | float) else time.time()
    if kind == "env":
        watch.env_at = at
        for name, spent in (event.get("startup") or {}).items():
            if isinstance(spent, int | float):
                watch.startup[str(name)] = float(spent)
        # the preload came before the environment record: its seconds are its own phase
        preloaded = watch.startup.get("worker_preload", 0.0)
        watch.startup["worker_start"] = at - watch.launched - preloaded
        watch.env = dict(event.get("environment") or {})
        dists = event.get("distributions") or {}
        record_distributions(job.report, str(watch.env.get("distributions_fingerprint")), dists)
        return False
    if kind == "ready":
        waited = event.get("gate_wait_s")
        waited = float(waited) if isinstance(waited, int | float) else 0.0
        if waited:
            watch.startup["worker_gate_wait"] = waited
        since_env = at - (watch.env_at or watch.launched)
        watch.startup["solution_load"] = since_env - waited
        build = event.get("build")
        watch.build = dict(build) if isinstance(build, dict) else None
        if watch.staged and watch.gate_opened:
            watch.startup["worker_staged"] = watch.gate_opened - watch.launched
        watch.loading = False
        return False
    if kind in ("judging", "judged"):
        watch.judging = kind == "judging"
        return False
    if kind == "begin":
        watch.loading = False
        watch.current = str(event.get("uuid"))
        return True
    if kind == "result":
        uuid = str(event.get("uuid"))
        line = dict(event.get("line") or {})
        if watch.startup:
            phases = {k: round(v, 6) for k, v in watch.startup.items()}
            line["phases_s"] = {**phases, **(line.get("phases_s") or {})}
            watch.startup = {}
        if watch.build is not None:
            line["build"] = watch.build
            watch.build = None
        append_line(job.report, line)
        mark("result", job.solution)
        watch.finished.add(uuid)
        watch.current = None
        return True
    return False
