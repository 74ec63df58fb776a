"""How a harness worker is started: an interpreter on this machine, or a container.

A launcher turns a job folder (envaudit.schema.progress) into a running worker and says how
host paths appear to that worker. The supervisor only polls, kills and collects what the
handle gives it, so supervision is the same around a process and around a container.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

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
    the supervisor (parent-death signal)."""

    def __init__(self, python: str, env: Mapping[str, str]) -> None:
        self.python = python
        self.env = dict(env)

    def seen_as(self, path: Path) -> str:
        return str(path)

    def start(self, job_dir: Path, log: Path) -> WorkerHandle:
        with log.open("wb") as log_handle:
            process = subprocess.Popen(
                [self.python, "-m", "envaudit.harness.worker", str(job_dir)],
                stdout=log_handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return ProcessHandle(process)
