"""The runtimes, registered once: `run` and `audit` both choose from here.

A runtime turns a planned job into a launcher for the supervisor, filling in its part of the
job's context (the closure hash and how it was checked, the image, how the GPU was passed).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.lock.config import FetchConfig
from envaudit.runtime.gpu_lock import holding_gpu
from envaudit.runtime.jobs import Job, RunRequest, RunRequestError, plan_job
from envaudit.runtime.launchers import Launcher
from envaudit.runtime.supervisor import (
    DEFAULT_WORKLOAD_TIMEOUT_S,
    BatchResult,
    Handoff,
    StagedWorker,
    run_batch,
    stage_batch,
)
from envaudit.schema.names import name_problem, shown


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
    """How long a job waits for its GPU when another process holds it (runtime/gpu_lock.py)."""


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
    """How many jobs' workers an audit starts ahead on a GPU, gated (runtime/audit.py): one,
    where a worker starts in well under a second, as a forked one does."""

    unavailable_hint: str | None = None
    """What to do when `unavailable` gives a reason."""

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


RUNTIME_NAMES = ("docker", "podman", "local", "host")
"""Every runtime, in the order `audit` prefers them."""


def make_runtime(name: str) -> Runtime:
    """The runtime of this name (one of RUNTIME_NAMES), importing only its own module: the
    container runtimes bring the Docker SDK and the image layer (0.1-0.3 s of every command's
    start), which an audit on the host or local runtime never uses."""
    if name in ("docker", "podman"):
        from envaudit.runtime.docker import ContainerRuntime

        return ContainerRuntime(name)
    if name == "local":
        from envaudit.runtime.local import LocalRuntime

        return LocalRuntime()
    from envaudit.runtime.host import HostRuntime

    return HostRuntime()


def runtimes() -> dict[str, Runtime]:
    """Every runtime, in the order `audit` prefers them."""
    return {name: make_runtime(name) for name in RUNTIME_NAMES}


def get_runtime(name: str, env: str | None = None, over: str | None = None) -> Runtime:
    """The runtime `name`, refusing (exit 2) an --env or --over it would silently ignore."""
    if name not in RUNTIME_NAMES:
        raise RunRequestError(
            f"no runtime {shown(name)}", hint=f"choose one of: {', '.join(RUNTIME_NAMES)}"
        )
    runtime = make_runtime(name)
    if env is not None and name_problem(env) is not None:
        raise RunRequestError(
            f"--env {shown(env)} is not an environment name: {name_problem(env)}",
            hint="name a folder of locks/ (`envaudit lock --all --check` lists them)",
        )
    if env is not None and not runtime.takes_env:
        raise RunRequestError(
            f"--env does not apply to the {name} runtime (it runs this interpreter as it is)",
            hint="use --runtime local or docker to run a solution in another lock",
        )
    if over is not None and not runtime.takes_over:
        raise RunRequestError(
            f"--over {shown(over)} does not apply to the {name} runtime (it has no image to"
            " lay over an imported stack)",
            hint="use --runtime docker (or podman) with --over, or leave --over out",
        )
    return runtime


def pick_runtime() -> tuple[str, str]:
    """(runtime, why) for an audit given no --runtime: a container engine when one answers,
    else local environments when uv can make them, else this interpreter."""
    reasons: list[str] = []
    for name in ("docker", "local"):
        why_not = make_runtime(name).unavailable()
        if why_not is None:
            chosen = "an engine answers" if name == "docker" else "uv is available"
            return name, "; ".join([*reasons, f"{name}: {chosen}"])
        reasons.append(f"{name}: {why_not}")
    return "host", "; ".join([*reasons, "host: this interpreter"])


def plan_run(request: RunRequest, runtime_name: str, options: RunOptions) -> Job:
    """The job, with everything that would stop it checked before any work: the runtime works
    here, and the request (solution, workloads, device, output places) holds."""
    runtime = get_runtime(runtime_name, options.env, options.over)
    runtime.require()
    return plan_job(request, runtime.name)


def ensure_env(runtime_name: str, env: str, options: RunOptions, progress: Progress) -> str | None:
    """Runtime.ensure before a run: whatever stops the env from being made here is an
    environment error of the run (exit 2), a stale or edited lock included (which `lock --check`
    counts as the lock's own failure, exit 1)."""
    try:
        return get_runtime(runtime_name, options.env).ensure(env, options, progress)
    except EnvauditError as exc:
        if exc.exit_code == EXIT_USAGE:
            raise
        raise EnvauditError(str(exc), EXIT_USAGE, exc.hint) from exc


@dataclass
class PreparedJob:
    """A job its runtime has prepared (the launcher made), with its first worker when that was
    started ahead (stage_job)."""

    job: Job
    launcher: Launcher
    staged: StagedWorker | None = None

    def discard(self) -> None:
        if self.staged is not None:
            self.staged.discard()


def prepare_planned(job: Job, options: RunOptions) -> PreparedJob:
    job, launcher = get_runtime(job.context.runtime, options.env).prepare(job, options)
    return PreparedJob(job, launcher)


def stage_job(request: RunRequest, runtime_name: str, options: RunOptions) -> PreparedJob:
    """Plan and prepare the job and start its first worker gated (runtime/supervisor.py,
    stage_batch), beside the job its GPU is running now; run_prepared follows it later."""
    prepared = prepare_planned(plan_run(request, runtime_name, options), options)
    prepared.staged = stage_batch(prepared.job, prepared.launcher, options.resume)
    return prepared


def run_planned(
    job: Job, options: RunOptions, handoff: Handoff | None = None
) -> tuple[Job, BatchResult]:
    """Prepare the planned job in its runtime and supervise it (with the handoff of its GPU in
    an audit: runtime/supervisor.py)."""
    return run_prepared(prepare_planned(job, options), options, handoff)


def run_prepared(
    prepared: PreparedJob, options: RunOptions, handoff: Handoff | None = None
) -> tuple[Job, BatchResult]:
    """Supervise a prepared job, holding its GPU (runtime/gpu_lock.py) while it runs."""
    job = prepared.job
    gpu = job.context.device_id
    held: AbstractContextManager[None] = (
        holding_gpu(gpu, options.gpu_wait_s) if job.device != "cpu" and gpu else nullcontext()
    )
    try:
        with held:
            result = run_batch(
                job,
                prepared.launcher,
                workload_timeout_s=options.workload_timeout_s,
                resume=options.resume,
                handoff=handoff,
                staged=prepared.staged,
            )
    except BaseException:
        prepared.discard()  # never followed: a GPU that stays held, an interrupt
        raise
    return job, result


def run_job(
    request: RunRequest, runtime_name: str, options: RunOptions, handoff: Handoff | None = None
) -> tuple[Job, BatchResult]:
    """Plan, prepare in the runtime, supervise: one solution on its workloads."""
    return run_planned(plan_run(request, runtime_name, options), options, handoff)


def fetch_env(env: str, options: RunOptions, progress: Progress) -> None:
    """Every artifact of the env's current lock into the store (a no-op when all are there)."""
    from envaudit.lock.fetch import fetch_lock
    from envaudit.lock.files import LockError, env_dir
    from envaudit.lock.resolve import current_lock

    lock = current_lock(env_dir(env, options.locks_dir))
    report = fetch_lock(lock, options.config, progress.on_fetch)
    if not report.complete:
        listed = "; ".join(report.missing[:3]) + (" ..." if len(report.missing) > 3 else "")
        raise LockError(
            f"{len(report.missing)} artifact(s) of {env} cannot be fetched: {listed}",
            hint=f"`envaudit fetch {env}` says where it looked (find-links, mirrors, index)",
        )
