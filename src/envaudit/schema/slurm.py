"""How an audit (or a bisection) runs as a Slurm job array, declared once.

An option model like EvalOptions: `envaudit audit` and `envaudit bisect-env` make their Slurm
flags from these fields (a field's metadata names its flag, its help and any further Typer
arguments), and the slurm executor (runtime/scheduling/slurm.py) reads them. It lives here,
below the runtime, so that the command line can declare the flags without importing the
runtime that uses them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _flag(flag: str, help: str, **typer_options: Any) -> dict[str, Any]:
    return {"flag": flag, "help": help, "typer": typer_options}


@dataclass(frozen=True)
class SlurmSettings:
    """How an audit runs as a Slurm job array; a field's metadata is its `audit` flag."""

    partition: str | None = field(default=None, metadata=_flag("--partition", "slurm."))
    account: str | None = field(default=None, metadata=_flag("--account", "slurm."))
    time_limit: str | None = field(
        default=None, metadata=_flag("--time-limit", "slurm: per task (`30`, `1:00:00`).")
    )
    """Per task, in Slurm's format (`30`, `1:00:00`)."""
    retries: int = field(
        default=2, metadata=_flag("--retries", "slurm: resubmissions of a failed task.", min=0)
    )
    poll_s: float = 2.0
    shard: int = field(
        default=0,
        metadata=_flag("--shard", "slurm: workloads per task (0: a solution's all).", min=0),
    )
    """Workloads per task (0: all of a solution's workloads in one task)."""
