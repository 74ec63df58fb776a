"""The evaluation options: what the harness checks and how it times, declared once.

One frozen dataclass travels whole from the command line to the worker: `envaudit run` and
`envaudit audit` make their flags from its fields (a field's metadata names its flag and help),
the job carries it, job.json records it (`record`), the worker reads it back (`from_record`),
and a Slurm task's `envaudit run` gets it as flags again (`cli_args`). Adding an option is one
field here and its use in the harness.

Standard library only: it is a declared harness file (envaudit.schema.harness).
"""

from __future__ import annotations

from dataclasses import MISSING, Field, asdict, dataclass, field, fields
from typing import Any, TypedDict

MEASURE_MS_RANGE = (10.0, 60_000.0)
"""--measure-ms bounds: below 10 ms the harness's first batch alone would exceed the budget."""

AUDIT = "audit"
"""The commands a flag appears on besides `run` (which takes every one)."""


def _flag(name: str, help: str | None, *, audit: bool = True) -> dict[str, Any]:
    return {"flag": name, "help": help, "commands": ("run", AUDIT) if audit else ("run",)}


class Budgets(TypedDict, total=False):
    """A CUDA timer's stopping-rule keywords (envaudit.harness.timing)."""

    budget_ms: float
    wander_ms: float


@dataclass(frozen=True)
class EvalOptions:
    validation_only: bool = field(
        default=False,
        metadata=_flag(
            "--validation-only",
            "Check the outputs and time nothing (no timing, no re-check on fresh inputs).",
            audit=False,
        ),
    )
    graph_timing: bool = field(
        default=False,
        metadata=_flag(
            "--graph-timing",
            "Also time the call captured in a CUDA graph, replayed (a GPU only; an audit on a"
            " GPU always does).",
            audit=False,
        ),
    )
    strict_diagnostic: bool = field(
        default=False,
        metadata=_flag(
            "--strict-diagnostic",
            "Also hold outputs to the definition's diagnostic_tolerance and record by how much"
            " each misses it (the formal status does not change).",
        ),
    )
    scale_probe: bool = field(
        default=False,
        metadata=_flag(
            "--scale-probe",
            "Also validate with the zero-mean normal random inputs scaled x0.1 and x10 and"
            " record how the error grows (the formal status does not change).",
        ),
    )
    measure_ms: float | None = field(
        default=None,
        metadata=_flag(
            "--measure-ms",
            "Measured time each timing may spend (default: the harness's 300 ms on a GPU, 200"
            " on the CPU); shorter is cheaper and scatters more on a power-limited GPU. Recorded"
            " in each line (timing.*.budget_ms).",
        ),
    )
    """In place of the harness's (TARGET_MEASURE_MS on a GPU, also when the clock wanders;
    CPU_TARGET_MEASURE_MS on the CPU)."""

    def budgets(self) -> Budgets:
        """The keyword arguments that carry measure_ms to a CUDA timer."""
        if self.measure_ms is None:
            return {}
        return {"budget_ms": self.measure_ms, "wander_ms": self.measure_ms}

    def problem(self) -> tuple[str, str] | None:
        """(what is wrong, hint) for a value the harness cannot honour, else None."""
        low, high = MEASURE_MS_RANGE
        if self.measure_ms is not None and not low <= self.measure_ms <= high:
            return (
                f"--measure-ms {self.measure_ms:g}: outside {low:g}-{high:g} ms",
                "the measured time each timing may spend; leave it out for the harness's own",
            )
        return None

    def record(self) -> dict[str, Any]:
        """The options as job.json holds them."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> EvalOptions:
        """The options of a job.json record (a missing field takes its default)."""
        given = record or {}
        return cls(**{f.name: given[f.name] for f in fields(cls) if f.name in given})

    def cli_args(self) -> list[str]:
        """These options as `envaudit run` flags (a Slurm task's command line)."""
        args: list[str] = []
        for option in fields(self):
            value = getattr(self, option.name)
            if value is True:
                args.append(option.metadata["flag"])
            elif value is not None and value is not False:
                args += [option.metadata["flag"], repr(value)]
        return args


def option_fields(command: str) -> list[Field[Any]]:
    """The options `command` ("run" or "audit") takes as flags, in declared order."""
    return [f for f in fields(EvalOptions) if command in f.metadata["commands"]]


def default_of(option: Field[Any]) -> Any:
    return None if option.default is MISSING else option.default
