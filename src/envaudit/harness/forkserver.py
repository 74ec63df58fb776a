"""A fork server: one process per interpreter and environment that has imported the harness
(and with it torch) once, and forks a fresh worker for every job.

`python -m envaudit.harness.forkserver SOCKET`. Importing torch took 2.9-4.5 s of every
worker's start on the H200 machine, a third of a cached audit (docs/lab/audit-throughput.md); a fork
costs milliseconds. Each job still gets a process of its own that has run no other solution:
the server never imports a solution and never touches CUDA (a CUDA context does not survive a
fork), so what a child inherits is the state right after the harness's imports; from the
second job on, usually also the imports of envaudit.harness.preload (see Preloaded).

Protocol: one connection per job on the Unix socket, one JSON line in ({job_dir, log, env}),
one JSON line out ({pid} or {error}). The child starts a session of its own (a group kill
reaches whatever it starts), sends its output to `log`, replaces its environment with `env`
(only variables read after import differ between jobs: the GPU's visibility, JIT cache
folders), dies with the server (parent-death signal) and runs the worker. A thread of the
server waits for its children and writes each exit status to `exit-<pid>` beside the socket
(negative: the signal that killed it, as `subprocess` reports it). The child also keeps the
job's connection, which its supervisor holds open until the job ends: when the supervisor is
gone, however it ended, the child reads end of file and kills its session.

The server exits when its standard input reaches end of file, that is when the supervisor that
started it is gone; or, started with `--idle-s N` (a lingering server, shared by the audits that
follow one another with the same interpreter and environment), once no worker of it has run
for N seconds, or at the first job after a folder on sys.path changed (a distribution was
installed, removed or upgraded: the imports it holds may be out of date; it replies `stale`).
Either way it first removes its socket, so that no new job reaches it, and never exits while a
worker it forked is running (they die with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from envaudit.harness import environment, preload, worker
from envaudit.harness.judge import adopt_orphans, die_with_parent
from envaudit.schema.progress import BYTECODE_CACHE_ENV, JOB_FILE, fork_exit_file
from envaudit.schema.sources import names_compiler

REAP_IDLE_S = 0.01


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return -os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw)


def _write_exit(socket_path: Path, pid: int, code: int) -> None:
    path = fork_exit_file(socket_path, pid)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(str(code))
    os.replace(tmp, path)


class Children:
    """The processes this server forked: its workers and its preloaded server. The server is a
    child subreaper, so whatever a worker leaves behind when it is killed (on a timeout, say:
    the judge then cannot end its job's processes itself) becomes the server's child; every
    child that is not one of these is such an orphan and is killed, at each reap. Forks and
    sweeps hold one lock, so that a worker just forked is never taken for an orphan."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.forked: set[int] = set()

    def fork(self) -> int:
        with self.lock:
            pid = os.fork()
            if pid == 0:
                self.forked = set()  # the child's own forks, if it forks (a preloaded server)
                return 0
            self.forked.add(pid)
            return pid

    def reaped(self, pid: int) -> bool:
        """Whether `pid`, reaped now, was forked here; kill the orphans adopted so far (a
        killed process's own children are adopted when it dies: the next reap sees them)."""
        with self.lock:
            ours = pid in self.forked
            self.forked.discard(pid)
            me = os.getpid()
            for entry in os.listdir("/proc"):
                if entry.isdigit() and int(entry) not in self.forked and _parent_of(entry) == me:
                    with contextlib.suppress(OSError):
                        os.kill(int(entry), signal.SIGKILL)
        return ours


CHILDREN = Children()


def _reap_forever(socket_path: Path) -> None:
    """Collect every ended child and record its status (a thread of its own: a SIGCHLD handler
    would run only when the main thread next runs Python, and it sits in `accept`); an
    adopted orphan has no status to record (Children)."""
    adopt_orphans()
    while True:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            time.sleep(REAP_IDLE_S)  # no child yet
            continue
        if CHILDREN.reaped(pid):
            _write_exit(socket_path, pid, _status(raw))


def _die_with_client(conn: socket.socket) -> None:
    """Kill this session when the job's connection reaches end of file: its supervisor closed
    it or is gone. A worker of a lingering server outlives its supervisor otherwise (the
    parent-death signal ties it to the server)."""
    with contextlib.suppress(OSError):
        while conn.recv(256):
            pass
    os.killpg(os.getpid(), signal.SIGKILL)


def _child(request: dict[str, Any], conn: socket.socket, inherited: list[socket.socket]) -> None:
    """In the forked child: become the worker of this job; never returns."""
    try:
        for sock in inherited:
            sock.close()
        os.setsid()
        die_with_parent()
        threading.Thread(target=_die_with_client, args=(conn,), daemon=True).start()
        os.chdir(request.get("cwd") or "/")
        # appending: the supervisor cuts a log that grows too long (supervisor.cap_log)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        if os.environ.get(BYTECODE_CACHE_ENV):
            sys.dont_write_bytecode = True  # the server's bytecode folder: the server's alone
        os.environ.clear()
        os.environ.update(request["env"])
        worker.IMPORTS_S = 0.0  # imported once, in the server
        code = worker.main(Path(request["job_dir"]))
    except BaseException:
        traceback.print_exc()
        code = 1
    worker.exit_now(code)


def _read_request(conn: socket.socket) -> bytes:
    """The job request: one line (the client sends it whole, then waits for the reply)."""
    with conn.makefile("rb") as stream:
        return stream.readline()


def _serve_one(conn: socket.socket, line: bytes, inherited: list[socket.socket]) -> None:
    """Fork the worker of the job request `line` read from `conn`, and reply with its pid. The
    child closes `conn` and the `inherited` sockets, which belong to the server."""
    with conn:
        try:
            request = json.loads(line)
            pid = CHILDREN.fork()
        except (ValueError, OSError) as exc:
            conn.sendall((json.dumps({"error": str(exc)}) + "\n").encode())
            return
        if pid == 0:
            _child(request, conn, inherited)
        conn.sendall((json.dumps({"pid": pid}) + "\n").encode())


def wants_preload(line: bytes) -> bool:
    """Whether the job's solution names what the preload's torch._dynamo serves
    (envaudit.schema.sources). Such a job waits for the preloaded server rather than import
    torch._dynamo itself: 4.3 s in a fresh process on the H200 machine, and 8.1 s for a
    FlexAttention solution whose worker did so while the preload ran beside it."""
    try:
        job = json.loads((Path(json.loads(line)["job_dir"]) / JOB_FILE).read_text())
        return names_compiler(Path(job["solution_file"]).parent)
    except (OSError, ValueError, KeyError, TypeError):
        return False


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"


def _preload() -> str | None:
    """Import PRELOAD; why this process must not fork workers if that changed what a fork would
    copy (CUDA, a thread), else None. A module that fails to import is left to the worker.

    The imports run with NVML_CHECK=1: torch.cuda.is_available() then counts devices through
    NVML instead of CUDA's runtime, which would leave every later fork unable to use CUDA
    (_forks_poisoned; on the H200 machine Inductor's import asks, benchmarks/preload_probe.py).
    The answer is the one a worker of this server gets: a CPU job's server starts with CUDA
    hidden as its workers do (runtime/supervision/launchers.py), a GPU job's with the GPUs
    visible."""
    threads = threading.active_count()
    before = os.environ.get(NVML_CHECK)
    os.environ[NVML_CHECK] = "1"
    try:
        preload.import_modules()
    finally:
        if before is None:
            del os.environ[NVML_CHECK]
        else:
            os.environ[NVML_CHECK] = before
    if torch.cuda.is_initialized():
        return "preloading initialised CUDA"
    if threading.active_count() != threads:
        return "preloading started a thread"
    if _forks_poisoned():
        return "preloading touched CUDA: a forked child could not use it"
    return None


def _forks_poisoned() -> bool:
    """Whether torch would refuse CUDA in a child forked now. Asking CUDA's runtime anything (a
    device count: torch.cuda.is_available() does, without an NVML-based check) marks every
    later fork as bad, though no context exists and torch.cuda.is_initialized() stays False;
    a probe child says. CPU builds of torch have no such mark."""
    probe = getattr(torch._C, "_cuda_isInBadFork", None)
    if probe is None:
        return False
    pid = os.fork()
    if pid == 0:
        os._exit(1 if probe() else 0)
    _, raw = os.waitpid(pid, 0)
    return _status(raw) != 0


class Preloaded:
    """A second server, forked from this one once it has served its first job (or, on demand,
    when the first job that wants it arrives: preload_beside_jobs): it imports
    PRELOAD while this one goes on forking workers, says `ready` on their shared socket pair,
    and from then on forks the worker of every job whose connection this one hands it (the
    request line and the socket, SCM_RIGHTS). Until it is ready, only the jobs that want the
    preload (wants_preload) are handed to it and wait; the others are forked here at once (on
    the H200 machine the second job of an audit waited 2.8 s for the preload when the server
    preloaded in its own process). A preload that goes wrong (CUDA initialised, a thread
    started, a crash) costs only the jobs handed over meanwhile, which their supervisor starts
    as fresh interpreters: this server never imported PRELOAD and keeps serving.
    PRELOADED_FILE beside the socket records how long the preload took once it is ready.
    PRELOAD (envaudit.harness.preload) is imported whole, whatever the jobs' solutions name,
    since every later job is forked from here; never by one solution for another."""

    def __init__(self, listener: socket.socket, socket_path: Path) -> None:
        self.link, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.state = "loading"
        parent = os.getpid()
        self.pid = CHILDREN.fork()
        if self.pid == 0:
            self.link.close()
            listener.close()
            _serve_handed(theirs, socket_path, parent)
        theirs.close()
        self.link.setblocking(False)

    def take(self, conn: socket.socket, line: bytes) -> bool:
        """Hand the job over if the preloaded server is ready, or still loading and the job
        wants the preload; whether it was handed over."""
        if self.state == "loading":
            try:
                said = self.link.recv(256)
            except BlockingIOError:
                said = None
            except OSError:
                said = b""
            if said is not None:
                self.state = "ready" if said == b"ready" else "gone"
        if self.state == "gone" or (self.state == "loading" and not wants_preload(line)):
            return False
        try:
            socket.send_fds(self.link, [line], [conn.fileno()])
        except OSError:
            self.state = "gone"
            return False
        conn.close()
        return True


PRELOAD_MODE_ENV = "ENVAUDIT_PRELOAD"
PRELOAD_BESIDE_MIN_CPUS = 4


def preload_beside_jobs() -> bool:
    """Whether the preloaded server starts right after the first job, importing beside it
    (ENVAUDIT_PRELOAD=beside), or only when a job that wants the preload arrives, which then
    waits for all of it (ENVAUDIT_PRELOAD=on-demand). By default beside on machines with at
    least PRELOAD_BESIDE_MIN_CPUS usable CPUs (16 on the H200 machine), on demand below: on a
    2-core machine the preload's imports slowed the first job's input draw from 0.5 s to 3.5 s,
    and they would slow its CPU timing as much."""
    mode = os.environ.get(PRELOAD_MODE_ENV, "")
    if mode in ("beside", "on-demand"):
        return mode == "beside"
    return len(os.sched_getaffinity(0)) >= PRELOAD_BESIDE_MIN_CPUS


PRELOADED_FILE = "preloaded"
MAX_REQUEST_BYTES = 1 << 20


def _serve_handed(link: socket.socket, socket_path: Path, parent: int) -> None:
    """The preloaded server's life (see Preloaded); never returns."""
    code = 0
    try:
        die_with_parent()
        if os.getppid() != parent:  # the first server died before the line above
            os._exit(0)
        began = time.perf_counter()
        refusal = _preload()
        if refusal is not None:
            link.sendall(refusal.encode())
            os._exit(0)
        threading.Thread(target=_reap_forever, args=(socket_path,), daemon=True).start()
        marker = socket_path.parent / PRELOADED_FILE
        marker.write_text(f"{time.perf_counter() - began:.3f}\n")
        link.sendall(b"ready")
        while True:
            line, fds, _, _ = socket.recv_fds(link, MAX_REQUEST_BYTES, 1)
            if not fds:  # the first server is gone
                break
            _serve_one(socket.socket(fileno=fds[0]), line, [link])
    except BaseException:
        traceback.print_exc()
        code = 1
    os._exit(code)


def _exit_at_end_of_input() -> None:
    sys.stdin.buffer.read()
    os._exit(0)


def _parent_of(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def has_workers(servers: set[int]) -> bool:
    """Whether a process forked by one of `servers` (this one, its preloaded server) other than
    the servers themselves is alive: a worker, or a zombie not yet reaped."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in servers and _parent_of(entry) in servers:
            return True
    return False


IDLE_CHECK_S = 1.0
BUSY_RESCAN_S = 5.0


class Lifetime:
    """When a lingering server (`--idle-s`) should stop taking jobs: idle_s after the later of
    its last job's arrival and the last moment a worker of it was seen running, or when
    sys.path's folders changed. Workers are looked for (a scan of /proc) only once idle_s has
    passed since then, and every BUSY_RESCAN_S while they run on: not every second beside a
    job's timing."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s = idle_s
        self.paths = environment.site_paths()
        self.busy(time.monotonic())

    def busy(self, now: float) -> None:
        self.last_busy = now
        self.next_check = now + self.idle_s

    def idle(self, servers: set[int]) -> bool:
        now = time.monotonic()
        if now < self.next_check:
            return False
        if has_workers(servers):
            self.last_busy = now
            self.next_check = now + min(BUSY_RESCAN_S, self.idle_s)
            return False
        if now - self.last_busy >= self.idle_s:
            return True
        self.next_check = self.last_busy + self.idle_s
        return False

    def stale(self) -> bool:
        return environment.site_paths() != self.paths


def _retire(server: socket.socket, socket_path: Path, servers: set[int]) -> None:
    """Take no more jobs (the socket goes first, so a supervisor starts a new server), wait for
    the running workers, exit; never returns."""
    with contextlib.suppress(OSError):
        socket_path.unlink()
    server.close()
    while has_workers(servers):
        time.sleep(IDLE_CHECK_S)
    os._exit(0)


def main(socket_path: Path, idle_s: float = 0.0) -> int:
    if torch.cuda.is_initialized():
        print("CUDA was initialised by the imports: forked workers could not use it", flush=True)
        return 1
    environment.distributions()  # scanned once here, checked (not rescanned) by each worker
    threading.Thread(target=_reap_forever, args=(socket_path,), daemon=True).start()
    lifetime = Lifetime(idle_s) if idle_s > 0 else None
    if lifetime is None:
        threading.Thread(target=_exit_at_end_of_input, daemon=True).start()
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(socket_path))
    server.listen(16)
    if lifetime is not None:
        server.settimeout(IDLE_CHECK_S)
    print("ready", flush=True)
    beside = preload_beside_jobs()
    preloaded: Preloaded | None = None
    while True:
        servers = {os.getpid()} | ({preloaded.pid} if preloaded is not None else set())
        try:
            conn, _ = server.accept()
        except TimeoutError:
            if lifetime is not None and lifetime.idle(servers):
                _retire(server, socket_path, servers)
            continue
        line = _read_request(conn)
        if lifetime is not None:
            lifetime.busy(time.monotonic())
        if lifetime is not None and lifetime.stale():
            with conn:
                with contextlib.suppress(OSError):
                    socket_path.unlink()
                conn.sendall(b'{"error": "stale: a folder on sys.path changed"}\n')
            _retire(server, socket_path, servers)
        if preloaded is None and not beside and wants_preload(line):
            preloaded = Preloaded(server, socket_path)
        if preloaded is not None and preloaded.take(conn, line):
            continue
        _serve_one(conn, line, [server] if preloaded is None else [server, preloaded.link])
        if preloaded is None and beside:
            preloaded = Preloaded(server, socket_path)


def _arguments(argv: list[str]) -> tuple[Path, float]:
    """[--idle-s SECONDS] SOCKET (the socket last: tests find it there)."""
    idle_s = 0.0
    if len(argv) == 3 and argv[0] == "--idle-s":
        idle_s = float(argv[1])
    return Path(argv[-1]), idle_s


if __name__ == "__main__":
    sys.exit(main(*_arguments(sys.argv[1:])))
