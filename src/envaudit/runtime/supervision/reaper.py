"""Worker containers die with their supervisor, however it ends.

A container's process is the engine's child, not the supervisor's, so nothing the kernel does
when a supervisor is killed (SIGKILL included) reaches it: the worker only noticed its
supervisor's stale heartbeat many seconds later, and its exited container stayed until the
next run swept it. So each supervisor process starts one reaper, a small process in a session
of its own, and tells it through a pipe which containers it has started ("+ID") and removed
("-ID"). The supervisor holds the pipe's only write end: when the supervisor ends, however it
ends, the reaper reads end-of-file at once and kills and removes every container still
registered. A job that ends normally has removed its container already; the reaper then asks
the engine nothing.

Run as `python -m envaudit.runtime.supervision.reaper KIND` (docker or podman); it imports the
engine client only when it has containers to remove.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from typing import IO


class Reaper:
    """The supervisor's end: one reaper process per engine kind, started on first use."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def watch(self, container_id: str) -> None:
        """Remove this container should this process end before `forget` is called."""
        self._send(f"+{container_id}\n")

    def forget(self, container_id: str) -> None:
        """The container is removed (or being removed) by its job: nothing left to reap."""
        self._send(f"-{container_id}\n")

    def _send(self, line: str) -> None:
        """Best effort: a reaper that cannot be started or reached leaves the next run's
        sweep (docker.remove_orphaned_containers) to find the container."""
        with self._lock:
            pipe = self._pipe()
            if pipe is None:
                return
            try:
                pipe.write(line.encode())
                pipe.flush()
            except OSError:
                self._process = None

    def _pipe(self) -> IO[bytes] | None:
        if self._process is None or self._process.poll() is not None:
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-m", "envaudit.runtime.supervision.reaper", self.kind],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C of the audit must not end it first
                )
            except OSError:
                return None
        return self._process.stdin


_REAPERS: dict[str, Reaper] = {}
_REAPERS_LOCK = threading.Lock()


def reaper_for(kind: str) -> Reaper:
    """This process's reaper for engine `kind`."""
    with _REAPERS_LOCK:
        if kind not in _REAPERS:
            _REAPERS[kind] = Reaper(kind)
        return _REAPERS[kind]


def registered(lines: IO[bytes]) -> list[str]:
    """The containers still registered when `lines` ends (the supervisor has gone)."""
    live: dict[str, None] = {}
    for raw in lines:
        line = raw.decode(errors="replace").strip()
        if line.startswith("+"):
            live[line[1:]] = None
        elif line.startswith("-"):
            live.pop(line[1:], None)
    return list(live)


def remove_all(kind: str, container_ids: list[str]) -> None:
    """Kill and remove each container (one already gone is fine)."""
    import docker.errors
    import requests.exceptions

    from envaudit.image.engine import Engine

    engine = Engine.connect(kind)
    for container_id in container_ids:
        with contextlib.suppress(
            docker.errors.DockerException, requests.exceptions.RequestException
        ):
            engine.client.containers.get(container_id).remove(force=True)


def main(argv: list[str]) -> int:
    kind = argv[0] if argv else "docker"
    left = registered(sys.stdin.buffer)
    if left:
        remove_all(kind, left)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
