"""What a runtime is: the one interface `run` and `audit` drive, whatever makes the environment.

A runtime makes an env ready here (`ensure`: fetch, build a venv or an image), then turns a
planned job into the launcher the supervisor starts workers with (`prepare`), filling in its part
of the job's context: the closure hash and how it was checked, the image, how the GPU was
passed. The runtimes themselves are in `envaudit.runtime.runtimes`; `envaudit.runtime.registry`
names them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.lock.config import FetchConfig
from envaudit.runtime.jobs import Job
from envaudit.runtime.supervision.launchers import Launcher
from envaudit.runtime.supervision.supervisor import DEFAULT_WORKLOAD_TIMEOUT_S


@dataclass(frozen=True)
class RunOptions:
    """How to run, the same for every job of a run or an audit."""

    env: str | None = None
    """Run in this lock instead of the one each solution declares (both are recorded)."""
    over: str | None = None
    """Container runtimes: the env's image over this imported stack (a base recipe of kind
    import) instead of the lock's own base."""
    workload_timeout_s: float = DEFAULT_WORKLOAD_TIMEOUT_S
    resume: bool = False
    locks_dir: Path = Path("locks")
    config: FetchConfig = field(default_factory=FetchConfig.from_environment)
    gpu_wait_s: float = 0.0
    """How long a job waits for its GPU when another process holds it
    (runtime/scheduling/gpu_lock.py)."""
    substitute: str | None = None
    """Container runtimes: the image of the env's declared substitute base of this name
    (`--substitute-base`), never taken unless named; every line records it."""


@dataclass(frozen=True)
class Progress:
    """Where a runtime reports a long preparation: downloads, build steps, base lines."""

    on_fetch: Callable[[str, int, int], None] | None = None
    on_step: Callable[[int, int, str], None] | None = None
    on_line: Callable[[str], None] | None = None


class Runtime(ABC):
    name: str
    summary: str
    takes_env: bool = True
    takes_over: bool = False
    """Whether `--over` (the env's image over an imported stack) means anything to it."""
    forks_workers: bool = False
    """Whether its workers are forked from a fork server with a preload (docs/harness.md)."""
    stage_ahead: int = 1
    """How many jobs' workers an audit starts ahead on a GPU, gated
    (runtime/scheduling/audit.py): one, where a worker starts in well under a second, as a
    forked one does."""

    unavailable_hint: str | None = None
    """What to do when `unavailable` gives a reason."""

    def __init__(self, name: str) -> None:
        self.name = name  # the registry's name for it (one class may serve several)

    def unavailable(self) -> str | None:
        """Why this runtime cannot run here (None: it can)."""
        return None

    def require(self) -> None:
        """EnvauditError (exit 2) when this runtime cannot run here: checked before any job."""
        why = self.unavailable()
        if why is not None:
            raise EnvauditError(
                f"the {self.name} runtime cannot run here: {why}", EXIT_USAGE, self.unavailable_hint
            )

    def ensure(self, env: str, options: RunOptions, progress: Progress) -> str | None:
        """Make this env ready to run here (fetch its artifacts, build its environment or
        image); a note on what was done, or None. Raises an EnvauditError when it cannot."""
        return None

    def warm(self, device_env: Mapping[str, str]) -> None:
        """Start, in the background, what the first worker of a job with these device
        variables will wait for, so that it overlaps the audit's planning and the job's
        preparation; it never raises (that worker's own start reports what fails). Nothing by
        default."""
        return None

    @abstractmethod
    def prepare(self, job: Job, options: RunOptions) -> tuple[Job, Launcher]:
        """The job with this runtime's context, and the launcher of its workers. Raises an
        EnvauditError (exit 2) when the environment cannot be made here."""
