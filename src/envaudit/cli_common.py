"""What every command of the command line shares: option types, the parsing of values, and
the one place an error ends a command (`render`: `error: ...`, `hint: ...`, its exit code)."""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import Field, fields
from pathlib import Path
from typing import Annotated, Any, NoReturn, get_type_hints

import typer

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.schema.options import EvalOptions, default_of, option_fields


def parse_path(value: str) -> Path:
    """A path option's value; the empty string is refused (exit 2), not read as '.' (which
    would put a report, or an export, into whatever folder the command runs in)."""
    if not value:
        raise typer.BadParameter("the empty path names nothing; name a file or folder")
    return Path(value)


FROM_FLAGS = EvalOptions()
"""Stands for the `evaluation` a command gets from evaluation_flags."""


def grouped_flags(
    group: type[Any], parameter: str, declared: list[Field[Any]]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """A flag for each of the dataclass `group`'s `declared` fields (its metadata names the
    flag, its help and any further typer.Option arguments), handed to the command whole as one
    `group` under `parameter`: the group's fields are declared once, where the group is."""
    hints = get_type_hints(group)
    flags = [
        inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=default_of(option),
            annotation=Annotated[
                hints[option.name],
                typer.Option(
                    option.metadata["flag"],
                    help=option.metadata["help"],
                    **option.metadata.get("typer", {}),
                ),
            ],
        )
        for option in declared
    ]

    def wrap(function: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(function)
        def command_with_flags(**given: Any) -> None:
            values = {option.name: given.pop(option.name) for option in declared}
            function(**given, **{parameter: group(**values)})

        own = inspect.signature(function, eval_str=True).parameters.values()
        kept = [p for p in own if p.name != parameter]
        command_with_flags.__signature__ = inspect.Signature([*kept, *flags])  # type: ignore[attr-defined]
        command_with_flags.__annotations__ = {p.name: p.annotation for p in [*kept, *flags]}
        return command_with_flags

    return wrap


def evaluation_flags(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The command's flags for the evaluation options it takes (envaudit.schema.options,
    where each is declared once), handed to it whole as `evaluation`."""
    return grouped_flags(EvalOptions, "evaluation", option_fields(command))


def slurm_flags() -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The Slurm executor's flags (envaudit.schema.slurm.SlurmSettings), handed to the command
    whole as `slurm`."""
    from envaudit.schema.slurm import SlurmSettings

    declared = [f for f in fields(SlurmSettings) if "flag" in f.metadata]
    return grouped_flags(SlurmSettings, "slurm", declared)


DefinitionOption = Annotated[
    str | None, typer.Option("--definition", help="The definition a --candidate implements.")
]
DataRoot = Annotated[
    Path,
    typer.Option(
        "--data-root", help="TraceSet root (definitions/, workloads/, blob/).", parser=parse_path
    ),
]


def render(exc: EnvauditError) -> NoReturn:
    """The one place errors are printed: `error:` naming what failed, `hint:` what to do."""
    for line in exc.rendered():
        typer.echo(line, err=True)
    raise typer.Exit(exc.exit_code)


@contextmanager
def reported() -> Iterator[None]:
    """Run a command's work; an EnvauditError from any layer ends it through render, and so
    does an OSError no layer turned into one (a file that cannot be read or written): exit 2."""
    try:
        yield
    except EnvauditError as exc:
        render(exc)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        render(EnvauditError(f"{where}{exc.strerror or exc}", EXIT_USAGE))


def usage_error(message: str, hint: str | None = None) -> NoReturn:
    render(EnvauditError(message, EXIT_USAGE, hint))


def unique_names(values: list[str] | None, option: str, plain: bool = True) -> list[str]:
    """`values` once each, in order (a repeated --solution or --workload runs once); with
    `plain`, each must be a plain name (schema.names): `../solutions/X` is a path, not one."""
    from envaudit.schema.names import name_problem, shown

    for value in values or []:
        problem = name_problem(value) if plain else None
        if problem is not None:
            usage_error(
                f"{option} {shown(value)} is not a name: {problem}", f"give {option} a name"
            )
    return list(dict.fromkeys(values or []))


SolutionsRoot = Annotated[
    Path,
    typer.Option(
        "--solutions-root",
        help="Folder of solutions: <name>/solution.json, or FlashInfer-Bench's *.json at any"
        " depth (the data root's solutions/ is searched too).",
        parser=parse_path,
    ),
]


LocksDir = Annotated[
    Path, typer.Option("--locks-dir", help="Folder of <env>/env.toml.", parser=parse_path)
]


RuntimeOption = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="docker, podman (the env's image), local (uv venv from the lock) or host (this"
        " interpreter). Default: docker when an engine answers, else local, else host.",
    ),
]


RunRuntimeOption = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        help="docker, podman (the env's image), local (uv venv from the lock) or host (this"
        " interpreter). Default: host (`audit` picks the best one here instead).",
    ),
]


OverOption = Annotated[
    str | None,
    typer.Option(
        "--over",
        help="docker: the env's image over this imported machine stack (a base recipe of kind"
        " import, verified against the lock) instead of the lock's own base.",
    ),
]


SubstituteOption = Annotated[
    str | None,
    typer.Option(
        "--substitute-base",
        help="Build (or run in) the env's image over this substitute base, declared in its"
        " env.toml (its substitutes list) and locked as a closure of its own, where its"
        " declared base cannot be made here. Never taken unless named; every image and line"
        " records it.",
        metavar="NAME",
    ),
]


EnvOption = Annotated[
    str | None,
    typer.Option("--env", help="Run in this lock instead of the declared one (not host)."),
]


JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
ThresholdOption = Annotated[
    float,
    typer.Option(
        "--threshold",
        metavar="PCT",
        min=0,
        help="Slower/faster only when the 95% interval of the time ratio (after/before, B/A)"
        " lies wholly beyond 1 ± PCT/100 (0: beyond noise at all).",
    ),
]
"""One meaning for `compare` and `bisect-env --on time`, by the report's comparison rule."""


def json_text(value: object) -> str:
    """`value` (dataclasses, paths, counters, sets within) as indented JSON, for --json."""
    import dataclasses
    import json

    def plain(item: object) -> object:
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            return {f.name: getattr(item, f.name) for f in dataclasses.fields(item)}
        if isinstance(item, set | frozenset):
            return sorted(item, key=str)
        return str(item)

    return json.dumps(value, indent=1, default=plain)


TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Seconds per workload (> 0).", min=0.001)
]


def finite_seconds(value: float, option: str) -> float:
    if not math.isfinite(value) or value <= 0:
        usage_error(f"{option} must be a positive number of seconds, got {value}")
    return value


def runtime_choice(runtime: str | None, default: str) -> str:
    """The --runtime given, else `default`; "pick" picks the best one here
    (commands.audit.audit_runtime) and says which, and why, on stderr."""
    if runtime is not None:
        return runtime
    if default != "pick":
        return default
    from envaudit.commands.audit import audit_runtime

    chosen, why = audit_runtime(None)
    typer.echo(f"runtime: {chosen} ({why})", err=True)
    return chosen
