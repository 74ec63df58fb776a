"""The way of one job, step by step, in the runtime the caller chose once
(registry.get_runtime): plan, make its env, prepare, stage, supervise.

    plan_run      the request checked whole (runtime, solution, data, device, output places)
    ensure_env    the env made ready in the runtime (fetched, built)
    prepare       the runtime's launcher, and its part of the job's context
    stage         (an audit) the job's first worker started ahead, gated
    supervise     workers run, lines written, the GPU held meanwhile
    run_job       plan, prepare, supervise: one solution on its workloads

`envaudit run` and `reproduce` take these in order; an audit (scheduling/audit.py) also
stages the next job of a GPU while the current one runs.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.runtime.base import Progress, RunOptions, Runtime
from envaudit.runtime.jobs import Job, RunRequest, plan_job
from envaudit.runtime.scheduling.gpu_lock import holding_gpu
from envaudit.runtime.supervision.launchers import Launcher
from envaudit.runtime.supervision.supervisor import (
    BatchResult,
    Handoff,
    StagedWorker,
    run_batch,
    stage_batch,
)


def plan_run(request: RunRequest, runtime: Runtime) -> Job:
    """The job, with everything that would stop it checked before any work: the runtime works
    here, and the request (solution, workloads, device, output places) holds."""
    runtime.require()
    return plan_job(request, runtime.name)


def ensure_env(runtime: Runtime, env: str, options: RunOptions, progress: Progress) -> str | None:
    """Runtime.ensure before a run: whatever stops the env from being made here is an
    environment error of the run (exit 2), a stale or edited lock included (which `lock --check`
    counts as the lock's own failure, exit 1)."""
    try:
        return runtime.ensure(env, options, progress)
    except EnvauditError as exc:
        if exc.exit_code == EXIT_USAGE:
            raise
        raise EnvauditError(str(exc), EXIT_USAGE, exc.hint) from exc


@dataclass
class PreparedJob:
    """A job its runtime has prepared (the launcher made), with its first worker when that was
    started ahead (stage)."""

    job: Job
    launcher: Launcher
    staged: StagedWorker | None = None

    def discard(self) -> None:
        if self.staged is not None:
            self.staged.discard()


def prepare(runtime: Runtime, job: Job, options: RunOptions) -> PreparedJob:
    """The job with its runtime's context, and the launcher of its workers."""
    job, launcher = runtime.prepare(job, options)
    return PreparedJob(job, launcher)


def stage(prepared: PreparedJob, options: RunOptions) -> PreparedJob:
    """Start the prepared job's first worker gated (supervision/supervisor.py, stage_batch),
    beside the job its GPU is running now; supervise follows it later."""
    prepared.staged = stage_batch(prepared.job, prepared.launcher, options.resume)
    return prepared


def supervise(
    prepared: PreparedJob, options: RunOptions, handoff: Handoff | None = None
) -> tuple[Job, BatchResult]:
    """Supervise a prepared job (with the handoff of its GPU in an audit), holding its GPU
    (scheduling/gpu_lock.py) while it runs."""
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
    request: RunRequest, runtime: Runtime, options: RunOptions, handoff: Handoff | None = None
) -> tuple[Job, BatchResult]:
    """Plan, prepare in the runtime, supervise: one solution on its workloads."""
    job = plan_run(request, runtime)
    return supervise(prepare(runtime, job, options), options, handoff)
