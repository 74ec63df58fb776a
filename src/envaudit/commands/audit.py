"""`envaudit audit`: the solutions and devices an audit names, and the executor that runs it
(local: runtime/scheduling/audit.py; slurm: one job array, runtime/scheduling/slurm.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from envaudit.commands.candidate import stage_beside
from envaudit.errors import EnvauditError
from envaudit.runtime.jobs import appending_to
from envaudit.runtime.scheduling.audit import (
    AuditPlan,
    AuditResult,
    BuildHook,
    all_solutions,
    run_audit,
    run_slurm_audit,
    solutions_of,
)
from envaudit.runtime.scheduling.slurm import SlurmSettings


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
    prepare_env: BuildHook,
) -> AuditResult:
    """The audit on this machine, or (with `slurm`) as one Slurm job array, holding its --out
    folder against a merge for the whole run (runtime.jobs.appending_to)."""
    with appending_to(plan.out):
        if slurm is not None:
            return run_slurm_audit(plan, slurm, echo, prepare_env)
        return run_audit(plan, lambda name, where: echo(f"audit: {name} on {where}"), prepare_env)
