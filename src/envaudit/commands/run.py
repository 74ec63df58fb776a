"""`envaudit run`: one solution on its workloads, its env made ready first, in one runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envaudit.commands.candidate import stage_candidate
from envaudit.commands.environments import MakeEnv
from envaudit.errors import EnvauditError
from envaudit.lock.dependencies import BuildTools, check_dependencies
from envaudit.runtime.base import RunOptions
from envaudit.runtime.jobs import Job, RunRequest, appending_to
from envaudit.runtime.registry import get_runtime
from envaudit.runtime.scheduling.steps import plan_run, prepare, supervise
from envaudit.runtime.supervision.supervisor import BatchResult
from envaudit.schema.options import EvalOptions


def solution_to_run(
    solution: str | None,
    candidate: Path | None,
    definition: str | None,
    data_root: Path,
    solutions_root: Path,
    env: str | None,
) -> tuple[str, Path]:
    """(solution name, the folder holding it): --solution as given, or a --candidate main.py
    staged as a solution of --definition in a folder of its own (nothing is written into
    solutions/). EnvauditError (exit 2) for flags that do not go together."""
    if (solution is None) == (candidate is None):
        raise EnvauditError("give either --solution NAME or --candidate PATH --definition NAME")
    if candidate is None:
        if definition is not None:
            raise EnvauditError(
                "--definition goes with --candidate (a solution names its own definition)"
            )
        assert solution is not None
        return solution, solutions_root
    if definition is None:
        raise EnvauditError("--candidate needs --definition NAME (the definition it implements)")
    return stage_candidate(candidate, definition, data_root, solutions_root, env)


def run_solution(
    request: RunRequest, runtime_name: str, options: RunOptions, make_env: MakeEnv
) -> tuple[Job, BatchResult]:
    """Everything checked first (the runtime's name and options, then plan_run), then the env
    made (the --env override, else the one the solution declares), then the job supervised."""
    runtime = get_runtime(runtime_name, options.env, options.over, options.substitute)
    job = plan_run(request, runtime)
    env = options.env or job.context.env
    if env and runtime.takes_env:
        check_dependencies(
            job.solution,
            job.dependencies,
            env,
            options.locks_dir,
            BuildTools(job.language, job.binding),
        )
    if env:
        make_env(runtime, options, env)
    with appending_to(job.report.parent):
        return supervise(prepare(runtime, job, options), options)


@dataclass(frozen=True)
class SolutionRunRequest:
    """What `envaudit run` was asked, its solution resolved (solution_to_run): the job's request
    (runtime.jobs.RunRequest) and its runtime's options (runtime.base.RunOptions) are made from
    it here, so the command line builds neither."""

    solution: str
    solutions_root: Path
    runtime: str
    data_root: Path = Path("workloads")
    locks_dir: Path = Path("locks")
    workloads: list[str] = field(default_factory=list)
    suite: str | None = None
    device: str | None = None
    gpu: str | None = None
    env: str | None = None
    over: str | None = None
    substitute: str | None = None
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    reference_cache: Path | None = None
    report: Path | None = None
    resume: bool = False
    workload_timeout_s: float = 300.0


@dataclass(frozen=True)
class RunOutcome:
    """What a run did, for its summary: the report it appended to, the solution it ran, the
    workloads that got a line and those --resume skipped."""

    report: Path
    solution: str
    written: set[str]
    skipped: list[str]


def run_requested(ask: SolutionRunRequest, make_env: MakeEnv) -> RunOutcome:
    """`envaudit run` whole: the job's request and options made, then run_solution."""
    request = RunRequest(
        solution=ask.solution,
        data_root=ask.data_root,
        solutions_root=ask.solutions_root,
        workloads=list(ask.workloads),
        suite=ask.suite,
        device=ask.device,
        gpu=ask.gpu,
        evaluation=ask.evaluation,
        reference_cache=ask.reference_cache,
        report=ask.report,
    )
    options = RunOptions(
        env=ask.env,
        over=ask.over,
        substitute=ask.substitute,
        workload_timeout_s=ask.workload_timeout_s,
        resume=ask.resume,
        locks_dir=ask.locks_dir,
    )
    job, result = run_solution(request, ask.runtime, options, make_env)
    return RunOutcome(job.report, job.solution, result.written, result.skipped)
