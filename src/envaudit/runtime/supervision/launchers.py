"""How a harness worker is started: an interpreter on this machine, or a container.

A launcher turns a job folder (envaudit.schema.progress) into a running worker and says how
host paths appear to that worker. The supervisor only polls, kills and collects what the
handle gives it, so supervision is the same around a process and around a container.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from envaudit.runtime.timeline import TIMELINE_ENV, mark
from envaudit.schema.harness import harness_hash
from envaudit.schema.progress import BYTECODE_CACHE_ENV, fork_exit_file
from envaudit.settings import FORKSERVER, PRELOAD, SERVER_IDLE_S, cache_root, read, value

PR_SET_PDEATHSIG = 1


class WorkerHandle(Protocol):
    def poll(self) -> int | None:
        """The exit status once the worker has ended (negative: killed by that signal)."""

    def kill(self) -> None:
        """Kill the worker and everything it started; return once it is gone."""

    def finish(self, log: Path) -> None:
        """After the worker ended: make sure its output is in `log`, release what it held."""


class Launcher(Protocol):
    def seen_as(self, path: Path) -> str:
        """How the worker sees this host path."""

    def start(self, job_dir: Path, log: Path) -> WorkerHandle:
        """Start the worker on this job folder, its output going to `log` (or collected into
        it by `finish`)."""


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the supervisor dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ProcessHandle:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    def poll(self) -> int | None:
        return self.process.poll()

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def finish(self, log: Path) -> None:
        """The output went to the log as it was written; the group was killed already."""


class ProcessLauncher:
    """A worker on this machine: an interpreter (this one, or a venv's) with these variables.

    The worker runs in its own session (a group kill reaches whatever it started) and dies with
    the supervisor (parent-death signal). Over a stack without bytecode it reads and writes its
    imports' bytecode in envaudit's cache, as a fork server does (bytecode_cache), and stops
    writing any before it loads the solution (harness/worker.py)."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.python = python
        self.env = dict(env)

    def seen_as(self, path: Path) -> str:
        return str(path)

    def start(self, job_dir: Path, log: Path) -> WorkerHandle:
        flags, env = bytecode_cache(self.python, self.env)
        with log.open("ab") as log_handle:
            process = subprocess.Popen(
                [self.python, *flags, "-m", "envaudit.harness.worker", str(job_dir)],
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return ProcessHandle(process)


FORK_SERVER_SWITCH = FORKSERVER.name
"""Set to 0 to start every worker as a fresh interpreter instead of forking it from a server."""
SERVER_READY_S = 300.0
KILL_WAIT_S = 10.0


def process_running(pid: int) -> bool:
    """Whether `pid` is a live process (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class ForkedHandle:
    """A worker forked by a fork server: not our child, so its status comes from the file the
    server writes when it reaps it. `conn` is the job's connection to the server, which the
    worker holds too: it stays open until `finish`, and closing it (or this process ending)
    makes the worker kill its session."""

    def __init__(self, pid: int, conn: socket.socket, server: ForkServer) -> None:
        self.pid = pid
        self.conn = conn
        self.server = server
        self.exit_path = fork_exit_file(server.socket, pid)

    def poll(self) -> int | None:
        try:
            return int(self.exit_path.read_text())
        except (OSError, ValueError):
            pass
        if not self.server.alive() and not process_running(self.pid):
            return -signal.SIGKILL  # died with its server (parent-death signal), unreaped
        return None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def finish(self, log: Path) -> None:
        """The output went to the log as it was written; forget the status file."""
        self.conn.close()
        with contextlib.suppress(OSError):
            self.exit_path.unlink()
        self.server.release()


SERVER_IDLE_ENV = SERVER_IDLE_S.name
"""Seconds a fork server lingers after its last worker has ended, for the next audit run with
the same interpreter, environment and working folder (a re-audit skips torch's import and the
preload: docs/harness.md). 0, the default: the server ends with the audit that started it."""


def server_idle_s() -> float:
    return value(SERVER_IDLE_S)


VOLATILE_ENV = frozenset({"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", TIMELINE_ENV})
"""Variables that change between two commands, left out of a lingering server's key: those a
shell keeps, and the supervisor's own timeline. No import reads them, and each worker gets its
job's own environment whole anyway."""


MAX_SOCKET_PATH_BYTES = 107
"""A Unix socket's path, without its final NUL (Linux's sockaddr_un)."""
SERVER_KEY_CHARS = 16
SERVER_NAME_BYTES = 1 + SERVER_KEY_CHARS + len("/socket")


def server_home() -> Path | None:
    """The private folder of this user's lingering servers (under XDG_RUNTIME_DIR, else the
    temporary folder), or None when it is not this user's alone (another user could then
    reach the sockets) or too deep for a socket's path: every server is then its audit's."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    home = base / f"envaudit-servers-{os.getuid()}"
    if len(os.fsencode(home)) + SERVER_NAME_BYTES > MAX_SOCKET_PATH_BYTES:
        return None
    try:
        home.mkdir(mode=0o700, exist_ok=True)
        info = home.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None
    return home


def server_key(python: str, env: Mapping[str, str]) -> str:
    """What a lingering server is shared by: the interpreter, the environment it imports
    under, the working folder (first on the worker's sys.path) and the harness's files."""
    kept = sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV)
    text = json.dumps([python, kept, os.getcwd(), harness_hash()])
    return hashlib.sha256(text.encode()).hexdigest()[:SERVER_KEY_CHARS]


LACKS_BYTECODE = (
    "import importlib.util as u, os, sys\n"
    "spec = u.find_spec('torch')\n"
    "origin = spec.origin if spec is not None else None\n"
    "sys.exit(0 if origin and not os.path.exists(u.cache_from_source(origin)) else 1)\n"
)
"""Exit 0 when the interpreter's torch has no bytecode where this interpreter looks for it."""
PROBE_TIMEOUT_S = 60.0


def bytecode_cache(python: str, env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The interpreter flags and environment a fork server of `python`, or a worker started as a
    fresh interpreter, starts with.

    When the interpreter's torch has no bytecode (a stack installed without it, or a Python run
    with PYTHONDONTWRITEBYTECODE over such a stack: the GPU machine's), every server would
    compile torch's sources again: `import torch` took 3.1-3.3 s there from sources against
    1.4-1.5 s from bytecode (docs/lab/audit-throughput.md). Such a process then reads and writes
    bytecode in a folder of envaudit's cache (`-X pycache_prefix`), not beside the stack's sources,
    which stay as they are. Bytecode is written there only before any solution is loaded: a server's
    workers stop writing it as they are forked (forkserver._child), a fresh worker just before
    it loads the solution (harness/worker.py), so no solution's code can leave bytecode there
    for a later process to run. A stack with bytecode is left alone."""
    plain = dict(env)
    python_env = tuple(sorted((k, v) for k, v in plain.items() if k.startswith("PYTHON")))
    if not _lacks_bytecode(python, python_env):
        return [], plain
    folder = cache_root() / "bytecode"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return [], plain
    plain.pop("PYTHONDONTWRITEBYTECODE", None)
    plain[BYTECODE_CACHE_ENV] = str(folder)
    return ["-X", f"pycache_prefix={folder}"], plain


@functools.lru_cache(maxsize=16)
def _lacks_bytecode(python: str, python_env: tuple[tuple[str, str], ...]) -> bool:
    """Whether `python`, under these PYTHON* variables (which alone decide where it finds torch
    and looks for bytecode), finds no bytecode for torch: probed once per process, not at every
    worker's start."""
    try:
        probe = subprocess.run(
            [python, "-c", LACKS_BYTECODE],
            env={**_without_python_variables(os.environ), **dict(python_env)},
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _without_python_variables(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("PYTHON")}


class ForkServer:
    """One running `envaudit.harness.forkserver` for an interpreter and a base environment.

    By default it is this audit's own: it reads its standard input until end of file, so when
    this process ends, however it ends, the pipe closes and the server exits, and its children
    with it (parent-death signal). With idle_s > 0 it lingers in server_home() after the audit
    for idle_s seconds, and the next audit with the same server_key joins it; starting one is
    serialised by a file lock, so that two audits starting together share one."""

    def __init__(self, python: str, env: Mapping[str, str], idle_s: float = 0.0) -> None:
        self.running = 0
        """Workers forked and not yet finished: a server with none may be closed."""
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0
        home = server_home() if idle_s > 0 else None
        self.lingers = home is not None
        if home is None:
            self.folder = Path(tempfile.mkdtemp(prefix="envaudit-fork-"))
        else:
            self.folder = home / server_key(python, env)
            self.folder.mkdir(mode=0o700, exist_ok=True)
        self.socket = self.folder / "socket"
        self.log = self.folder / "server.log"
        if not self.lingers:
            try:
                self._start(python, env, [])
            except BaseException:
                shutil.rmtree(self.folder, ignore_errors=True)
                raise
            return
        with (self.folder / "start.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.pid = self._running_server()
            if not self.pid:
                with contextlib.suppress(FileNotFoundError):
                    self.socket.unlink()
                self._start(python, env, ["--idle-s", repr(idle_s)])
                (self.folder / "pid").write_text(str(self.pid))

    def _running_server(self) -> int:
        """The pid of the lingering server that listens here, or 0 (also when the recorded pid
        now belongs to another process: a server that died without removing its socket)."""
        try:
            pid = int((self.folder / "pid").read_text())
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return 0
        if os.fsencode(self.socket) not in command or not process_running(pid):
            return 0
        return pid if self.socket.exists() else 0

    def _start(self, python: str, env: Mapping[str, str], options: list[str]) -> None:
        mark("fork_server_start")
        flags, server_env = bytecode_cache(python, env)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [python, *flags, "-m", "envaudit.harness.forkserver", *options, str(self.socket)],
                stdin=subprocess.DEVNULL if self.lingers else subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=server_env,
                start_new_session=True,
            )
        self.pid = self.process.pid
        ready = self._ready()
        if self.process.stdout is not None:
            self.process.stdout.close()
        if not ready:
            self._kill()
            raise OSError(f"the fork server did not start: {self.log.read_text()[-2000:]}")
        mark("fork_server_ready")

    def _ready(self) -> bool:
        """Whether the server said `ready` (its imports done) within SERVER_READY_S."""
        assert self.process is not None
        stdout = self.process.stdout
        if stdout is None:
            return False
        found = threading.Event()

        def read() -> None:
            if stdout.readline().strip() == b"ready":
                found.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(SERVER_READY_S)
        return found.is_set()

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return process_running(self.pid)

    def fork(self, job_dir: Path, log: Path, env: Mapping[str, str]) -> tuple[int, socket.socket]:
        """Have the server fork the job's worker: its pid, and the connection it holds."""
        request = {"job_dir": str(job_dir), "log": str(log), "env": dict(env), "cwd": os.getcwd()}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(60)
            conn.connect(str(self.socket))
            conn.sendall((json.dumps(request) + "\n").encode())
            with conn.makefile("rb") as stream:
                reply = json.loads(stream.readline() or b"{}")
        except BaseException:
            conn.close()
            raise
        if "pid" not in reply:
            conn.close()
            raise OSError(f"the fork server refused the job: {reply.get('error', 'no reply')}")
        return int(reply["pid"]), conn

    def release(self) -> None:
        with _SERVERS_LOCK:
            self.running = max(0, self.running - 1)

    def close(self) -> None:
        """End the audit's own server; leave a lingering one to its idle time."""
        if self.lingers:
            return
        self._kill()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def _server_slot(python: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return python, tuple(sorted(env.items()))


_SERVERS: dict[tuple[str, tuple[tuple[str, str], ...]], ForkServer] = {}
"""The running servers by _server_slot."""
_SERVERS_LOCK = threading.Lock()


MAX_IDLE_SERVERS = 2
"""Servers kept with no worker running (each holds torch's imports, a few hundred MB)."""


def fork_server(python: str, env: Mapping[str, str], idle_s: float = 0.0) -> ForkServer:
    """The running server for this interpreter and environment, started (or joined, when it
    lingers) on first use and again if it died, with one worker reserved on it. Idle servers
    beyond MAX_IDLE_SERVERS are closed, oldest first; a server with a worker running is never
    closed (its workers would die with it)."""
    key = _server_slot(python, env)
    with _SERVERS_LOCK:
        server = _SERVERS.pop(key, None)
        if server is not None and not server.alive():
            server.close()
            server = None
        idle = [k for k, s in _SERVERS.items() if s.running == 0]
        for old in idle[: max(0, len(idle) - MAX_IDLE_SERVERS + 1)]:
            _SERVERS.pop(old).close()
        if server is None:
            server = ForkServer(python, env, idle_s)
        _SERVERS[key] = server  # most recently used last
        server.running += 1  # reserved for the caller's worker; `release` gives it back
        return server


_WARMED: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
_WARMED_LOCK = threading.Lock()


def warm_fork_server(python: str, env: Mapping[str, str], idle_s: float = 0.0) -> None:
    """Start (or join) the server for this interpreter and environment on a thread of its own,
    reserving no worker on it, and return at once. A job's first worker then finds it started,
    or waits under the servers' lock for the start already under way, instead of only starting
    it then: the server's imports (about 2 s on the H200 machine) overlap whatever the caller
    does meanwhile (an audit's planning, the host runtime's environment check). A server that
    cannot start is left to the worker's own start, which reports it. Asked once per server in
    a process (an audit asks before its jobs, and the host runtime again for every job)."""
    slot = _server_slot(python, env)
    with _WARMED_LOCK:
        if slot in _WARMED:
            return
        _WARMED.add(slot)

    def start() -> None:
        with contextlib.suppress(OSError, ValueError):
            fork_server(python, env, idle_s).release()

    mark("fork_server_warm")
    threading.Thread(target=start, name="envaudit-warm-server", daemon=True).start()


def forget_fork_server(server: ForkServer) -> None:
    """Drop `server` from the running ones (it refused a job or went away): the next job
    starts or joins another."""
    with _SERVERS_LOCK:
        for key, known in list(_SERVERS.items()):
            if known is server:
                del _SERVERS[key]
        server.running = max(0, server.running - 1)
    if not server.lingers:
        server.close()


@atexit.register
def close_fork_servers() -> None:
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.close()
        _SERVERS.clear()


VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class ForkServerLauncher:
    """A worker forked from a fork server of this interpreter (envaudit.harness.forkserver):
    the harness's imports, torch's among them, are paid once per interpreter and environment
    rather than once per job. `env` is what the server starts with; `late` holds the variables
    that differ between jobs and are read only after the imports (the GPU's visibility, JIT
    cache folders), set in each forked worker. A CPU job's hidden GPUs (CUDA_VISIBLE_DEVICES
    empty) stay in the server's environment: its preload's imports then see no GPU, as the
    worker does (forkserver._preload), and CPU and GPU jobs get servers of their own. Falls
    back to a fresh interpreter when the server cannot start or fork, or when
    ENVAUDIT_FORKSERVER=0."""

    def __init__(self, python: str, env: Mapping[str, str], late: Mapping[str, str]) -> None:
        self.python = python
        self.env = {k: v for k, v in env.items() if k not in late}
        if late.get(VISIBLE_DEVICES) == "":
            self.env[VISIBLE_DEVICES] = ""
        self.late = dict(late)
        self.idle_s = server_idle_s()
        read(PRELOAD)  # the harness reads it (forkserver.py); a bad value is refused here

    def seen_as(self, path: Path) -> str:
        return str(path)

    def warm(self) -> None:
        """Have this launcher's fork server started in the background (warm_fork_server)."""
        if value(FORKSERVER):
            warm_fork_server(self.python, self.env, self.idle_s)

    def start(self, job_dir: Path, log: Path) -> WorkerHandle:
        full = {**self.env, **self.late}
        if value(FORKSERVER):
            try:
                return self._forked(job_dir, log, full)
            except (OSError, ValueError) as exc:
                with log.open("a") as note:
                    note.write(f"envaudit: no fork server ({exc}); starting an interpreter\n")
        return ProcessLauncher(self.python, full).start(job_dir, log)

    def _forked(self, job_dir: Path, log: Path, env: Mapping[str, str]) -> WorkerHandle:
        """Forked by the running server; when a lingering one has just gone (idle, or stale and
        retiring), by a new one."""
        for attempt in (1, 2):
            server = fork_server(self.python, self.env, self.idle_s)
            try:
                pid, conn = server.fork(job_dir, log, env)
            except (OSError, ValueError):
                forget_fork_server(server)
                if attempt == 2 or not server.lingers:
                    raise
                continue
            except BaseException:
                server.release()
                raise
            return ForkedHandle(pid, conn, server)
        raise AssertionError("unreachable")
