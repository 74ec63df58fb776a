"""`envaudit audit`: the solutions and devices an audit names, and the executor that runs it
(local: runtime/scheduling/audit.py; slurm: one job array, runtime/scheduling/slurm.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.commands.candidate import stage_beside
from envaudit.commands.environments import MakeEnv
from envaudit.errors import EnvauditError
from envaudit.runtime.base import RunOptions
from envaudit.runtime.jobs import appending_to
from envaudit.runtime.registry import get_runtime, pick_runtime
from envaudit.runtime.scheduling.audit import (
    AuditPlan,
    BuildHook,
    JobProgress,
    all_solutions,
    run_audit,
    run_slurm_audit,
    solutions_of,
)
from envaudit.runtime.scheduling.audit import (
    AuditResult as AuditResult,
)
from envaudit.schema.options import EvalOptions
from envaudit.schema.slurm import SlurmSettings


def check_audit_flags(
    executor: str,
    gpus: list[str] | None,
    device: str | None,
    candidate: Path | None,
    definition: str | None,
) -> None:
    """EnvauditError (exit 2) for flags that contradict each other or name no executor."""
    if executor not in ("local", "slurm"):
        raise EnvauditError(
            f"no executor {executor}", hint="use --executor local or --executor slurm"
        )
    if gpus and device:
        raise EnvauditError("give either --gpu or --device, not both")
    if candidate is not None and definition is None:
        raise EnvauditError(
            "--candidate PATH needs --definition NAME (the definition it implements)"
        )


def audit_devices(
    gpus: list[str] | None, device: str | None
) -> list[tuple[str | None, str | None]]:
    """(gpu uuid, device) pairs: each --gpu, else the --device (the CPU by default)."""
    if gpus:
        return [(gpu, None) for gpu in gpus]
    return [(None, device if device is not None else "cpu")]


def solutions_to_audit(
    names: list[str],
    candidate: Path | None,
    definition: str | None,
    data_root: Path,
    solutions_root: Path,
    env: str | None,
) -> tuple[list[str], Path]:
    """(solution names, the folder holding them): those named, else every solution of
    --definition (in either layout, under --solutions-root and the data root's solutions/),
    else every solution; with a --candidate, it beside --definition's solutions in a folder of
    their own."""
    if candidate is not None and definition is not None:
        return stage_beside(candidate, definition, data_root, solutions_root, env, names)
    if definition is not None:
        if names:
            raise EnvauditError(
                "--solution and --definition (without --candidate) do not go together",
                hint="name the solutions with --solution, or audit every solution of a"
                " definition with --definition",
            )
        return solutions_of(definition, solutions_root, data_root), solutions_root
    return names or all_solutions(solutions_root, data_root), solutions_root


def execute_audit(
    plan: AuditPlan,
    slurm: SlurmSettings | None,
    echo: Callable[[str], None],
    progress: JobProgress | None,
    prepare_env: BuildHook,
) -> AuditResult:
    """The audit on this machine (its jobs told to `progress`), or (with `slurm`) as one
    Slurm job array (its events to `echo`), holding its --out folder against a merge for the
    whole run (runtime.jobs.appending_to)."""
    with appending_to(plan.out):
        if slurm is not None:
            return run_slurm_audit(plan, slurm, echo, prepare_env)
        return run_audit(plan, progress, prepare_env)


def audit_runtime(asked: str | None) -> tuple[str, str | None]:
    """(the runtime an audit runs in, why it was picked): the one asked for as it is, else the
    best one this machine has (runtime.registry.pick_runtime) with its reason, for the user to
    see which runtime the lines will record."""
    if asked is not None:
        return asked, None
    return pick_runtime()


@dataclass(frozen=True)
class AuditRequest:
    """What `envaudit audit` was asked, its flags checked (check_audit_flags) and its runtime
    chosen (audit_runtime): the audit's plan and its runtime options are made from it here, so
    the command line never builds either."""

    solutions: list[str]
    runtime: str
    out: Path
    candidate: Path | None = None
    definition: str | None = None
    gpus: list[str] | None = None
    device: str | None = None
    env: str | None = None
    over: str | None = None
    substitute: str | None = None
    workload_timeout_s: float = 300.0
    resume: bool = False
    gpu_wait_s: float = 0.0
    suite: str | None = None
    each_gpu: bool = False
    cpu_jobs: int = 1
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    locks_dir: Path = Path("locks")
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    slurm: SlurmSettings | None = None
    """Run it as one Slurm job array with these settings (None: on this machine)."""


def audit(
    request: AuditRequest,
    echo: Callable[[str], None],
    make_env: MakeEnv,
    progress: JobProgress | None = None,
) -> AuditResult:
    """The whole audit: its options, the solutions it names (a --candidate staged beside
    --definition's), its plan, then the executor; `make_env` makes each env ready (with the
    caller's progress display) before its jobs run, `progress` is told of each job."""
    options = RunOptions(
        request.env,
        request.over,
        request.workload_timeout_s,
        request.resume,
        locks_dir=request.locks_dir,
        gpu_wait_s=request.gpu_wait_s,
        substitute=request.substitute,
    )
    names, solutions_root = solutions_to_audit(
        request.solutions,
        request.candidate,
        request.definition,
        request.data_root,
        request.solutions_root,
        request.env,
    )
    plan = AuditPlan(
        solutions=names,
        devices=audit_devices(request.gpus, request.device),
        out=request.out,
        runtime=request.runtime,
        options=options,
        data_root=request.data_root,
        solutions_root=solutions_root,
        suite=request.suite,
        evaluation=request.evaluation,
        each_gpu=request.each_gpu,
        cpu_jobs=request.cpu_jobs,
    )
    prepare = env_preparer(request.runtime, options, make_env)
    return execute_audit(plan, request.slurm, echo, progress, prepare)


def env_preparer(runtime_name: str, options: RunOptions, make_env: MakeEnv) -> BuildHook:
    """A hook that makes an env ready in this runtime, returning why it cannot be had (one
    line, kept on the jobs that needed it) or None: one env that cannot be made does not stop
    the audit's other envs."""
    runtime = get_runtime(runtime_name, options.env, options.over, options.substitute)

    def prepare(env: str) -> str | None:
        try:
            make_env(runtime, options, env)
        except EnvauditError as exc:
            return exc.one_line()
        return None

    return prepare
