"""The `envaudit` command line: thin Typer commands over the layers below. No logic lives here."""

from __future__ import annotations

import functools
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, NoReturn, get_type_hints

import typer

from envaudit import __version__
from envaudit.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, EnvauditError, hint_line
from envaudit.schema.options import EvalOptions, default_of, option_fields

app = typer.Typer(
    name="envaudit",
    help="Validate and time kernel solutions, each in the exact environment it declares.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
base_app = typer.Typer(help="Offline base images built from containers/.", no_args_is_help=True)
app.add_typer(base_app, name="base")


def _path(value: str) -> Path:
    """A path option's value; the empty string is refused (exit 2), not read as '.' (which
    would put a report, or an export, into whatever folder the command runs in)."""
    if not value:
        raise typer.BadParameter("the empty path names nothing; name a file or folder")
    return Path(value)


FROM_FLAGS = EvalOptions()
"""Stands for the `evaluation` a command gets from _evaluation_flags."""


def _evaluation_flags(command: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """The command's flags for the evaluation options it takes (envaudit.schema.options,
    where each is declared once), handed to it whole as `evaluation`."""

    def wrap(function: Callable[..., None]) -> Callable[..., None]:
        declared = option_fields(command)
        hints = get_type_hints(EvalOptions)
        flags = [
            inspect.Parameter(
                option.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default_of(option),
                annotation=Annotated[
                    hints[option.name],
                    typer.Option(option.metadata["flag"], help=option.metadata["help"]),
                ],
            )
            for option in declared
        ]

        @functools.wraps(function)
        def command_with_flags(**given: Any) -> None:
            values = {option.name: given.pop(option.name) for option in declared}
            function(**given, evaluation=EvalOptions(**values))

        own = inspect.signature(function, eval_str=True).parameters.values()
        kept = [p for p in own if p.name != "evaluation"]
        command_with_flags.__signature__ = inspect.Signature([*kept, *flags])  # type: ignore[attr-defined]
        command_with_flags.__annotations__ = {p.name: p.annotation for p in [*kept, *flags]}
        return command_with_flags

    return wrap


DataRoot = Annotated[
    Path,
    typer.Option(
        "--data-root", help="TraceSet root (definitions/, workloads/, blob/).", parser=_path
    ),
]


def _render(exc: EnvauditError) -> NoReturn:
    """The one place errors are printed: `error:` naming what failed, `hint:` what to do."""
    for line in exc.rendered():
        typer.echo(line, err=True)
    raise typer.Exit(exc.exit_code)


@contextmanager
def _reported() -> Iterator[None]:
    """Run a command's work; an EnvauditError from any layer ends it through _render, and so
    does an OSError no layer turned into one (a file that cannot be read or written): exit 2."""
    try:
        yield
    except EnvauditError as exc:
        _render(exc)
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        _render(EnvauditError(f"{where}{exc.strerror or exc}", EXIT_USAGE))


def _error(message: str, hint: str | None = None) -> NoReturn:
    _render(EnvauditError(message, EXIT_USAGE, hint))


def _names(values: list[str] | None, option: str, plain: bool = True) -> list[str]:
    """`values` once each, in order (a repeated --solution or --workload runs once); with
    `plain`, each must be a plain name (schema.names): `../solutions/X` is a path, not one."""
    from envaudit.schema.names import name_problem, shown

    for value in values or []:
        problem = name_problem(value) if plain else None
        if problem is not None:
            _error(f"{option} {shown(value)} is not a name: {problem}", f"give {option} a name")
    return list(dict.fromkeys(values or []))


SolutionsRoot = Annotated[
    Path, typer.Option("--solutions-root", help="Folder of <name>/solution.json.", parser=_path)
]


def _version(value: bool) -> None:
    if value:
        typer.echo(f"envaudit {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """envaudit: one hash-pinned environment per solution, one shared harness, one report."""


@app.command("check-inputs")
def check_inputs(
    data_root: DataRoot = Path("workloads"),
    definition: Annotated[
        list[str] | None, typer.Option("--definition", help="Check only this definition.")
    ] = None,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Count warnings (no hash, no provenance, ...) as problems."),
    ] = False,
) -> None:
    """Check every definition, workload, tensor path and blob of a TraceSet root."""
    from envaudit.dataset.checks import check_inputs as run_checks
    from envaudit.dataset.traceset import DatasetRootError

    with _reported():
        try:
            report = run_checks(data_root, definition or [])
        except DatasetRootError as exc:
            hint = "pass --data-root pointing at a folder holding definitions/"
            raise EnvauditError(str(exc), hint=hint) from None
    for finding in report.findings:
        typer.echo(finding.render())
    typer.echo(report.summary())
    failed = report.errors or (strict and report.warnings)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
def doctor(
    locks_dir: Annotated[Path, typer.Option("--locks-dir", help="Folder of lock dirs.")] = Path(
        "locks"
    ),
) -> None:
    """What is available here: engine, GPUs, runtimes, uv, store, images; which runtime
    `audit` picks."""
    from envaudit.runtime.doctor import diagnose

    if not locks_dir.is_dir():
        _error(f"--locks-dir {locks_dir} is not a folder", "point it at the folder of <env>/")
    with _reported():
        checks = diagnose(locks_dir)
    width = max(len(c.name) for c in checks)
    for check in checks:
        typer.echo(f"{check.severity:7} {check.name:{width}}  {check.message}")
        if check.hint:
            typer.echo(f"{'':7} {'':{width}}  {hint_line(check.hint)}")
    raise typer.Exit(EXIT_FAILED if any(c.severity == "error" for c in checks) else EXIT_OK)


LocksDir = Annotated[
    Path, typer.Option("--locks-dir", help="Folder of <env>/env.toml.", parser=_path)
]


@app.command()
def lock(
    envs: Annotated[
        list[str] | None, typer.Argument(help="Lock directory names under locks/.")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Offline: exit 1 if lock.json is stale or edited.")
    ] = False,
    all_envs: Annotated[bool, typer.Option("--all", help="Every env under --locks-dir.")] = False,
    no_build: Annotated[
        bool, typer.Option("--no-build", help="Resolve only; leave unbuilt sources unbuilt.")
    ] = False,
    rebuild: Annotated[
        list[str] | None,
        typer.Option("--rebuild", help="Build this source again (repeatable).", metavar="SOURCE"),
    ] = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """(Re)generate locks/ENV/lock.json from env.toml (uv resolves, sources are built into the
    store); --check verifies it."""
    from envaudit.lock.build import lock_and_build
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.files import LockError, env_dir, write_lock
    from envaudit.lock.resolve import stale_reasons

    names = sorted(p.parent.name for p in locks_dir.glob("*/env.toml")) if all_envs else envs
    if all_envs and not names:
        _error(f"--all: no environment under {locks_dir} (no */env.toml)", "pass --locks-dir")
    if not names:
        _error("name at least one environment, or pass --all")
    if no_build and rebuild:
        _error("--rebuild and --no-build contradict each other")
    stale = 0
    with _reported():
        for name in names:
            try:
                folder = env_dir(name, locks_dir)
                if check:
                    reasons = stale_reasons(folder)
                    stale += bool(reasons)
                    status = "stale: " + "; ".join(reasons) if reasons else "current"
                    typer.echo(f"{name}: {status}")
                    continue
                sealed, messages = lock_and_build(
                    folder, FetchConfig.from_environment(), build=not no_build, rebuild=rebuild
                )
                for message in messages:
                    typer.echo(f"{name}: {message}")
                path = write_lock(folder, sealed)
                typer.echo(
                    f"{name}: {len(sealed.packages)} packages, closure"
                    f" {sealed.closure_hash[:16]} -> {path}"
                )
            except LockError as exc:
                if check and exc.exit_code == EXIT_FAILED:
                    stale += 1
                    typer.echo(f"{name}: refused: {exc}")
                    continue
                raise
    raise typer.Exit(EXIT_FAILED if stale else EXIT_OK)


@app.command()
def fetch(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    offline: Annotated[bool, typer.Option("--offline", help="Use only the store.")] = False,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Rehash every store entry (sizes are always checked)."),
    ] = False,
    store: Annotated[
        Path | None, typer.Option("--store", help="Store folder (default: ENVAUDIT_STORE).")
    ] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Also look in this folder.")
    ] = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Put every artifact of a lock into the content-addressed store, sha256-verified; a bad
    store entry is quarantined and fetched again."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.fetch import fetch_lock
    from envaudit.lock.files import LockError, env_dir
    from envaudit.lock.resolve import current_lock
    from envaudit.report.console import byte_progress

    with _reported():
        config = FetchConfig.from_environment(store, find_links, offline=offline)
    try:
        locked = current_lock(env_dir(env, locks_dir))
        with byte_progress() as progress:
            report = fetch_lock(locked, config, progress, verify=verify)
    except LockError as exc:
        _render(exc)
    for message in report.quarantined:
        typer.echo(f"quarantined: {message}", err=True)
    for filename, origin in report.fetched:
        typer.echo(f"fetched {filename} ({origin})")
    for message in report.missing:
        typer.echo(f"missing: {message}", err=True)
    typer.echo(
        f"{env}: {len(report.present)} already in the store, {len(report.fetched)} fetched,"
        f" {len(report.quarantined)} quarantined, {len(report.missing)} missing;"
        f" store {config.store}"
    )
    raise typer.Exit(EXIT_OK if report.complete else EXIT_FAILED)


@app.command("verify-env")
def verify_env(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    python: Annotated[
        str | None, typer.Option("--python", help="Interpreter to inspect (default: this one).")
    ] = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Also fail on installed packages not in the lock.")
    ] = False,
    locks_dir: LocksDir = Path("locks"),
    store: Annotated[
        Path | None,
        typer.Option("--store", help="Content-addressed store (default: ENVAUDIT_STORE)."),
    ] = None,
) -> None:
    """Compare an installed environment with a lock; exit 1 on drift."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.files import env_dir, load_lock
    from envaudit.lock.verify import compare, installed_distributions, python_version, render

    with _reported():
        locked = load_lock(env_dir(env, locks_dir))
        interpreter = python or sys.executable
        installed = installed_distributions(interpreter)
        drift = compare(
            locked,
            installed,
            store or FetchConfig.from_environment().store,
            python_version(interpreter),
        )
    typer.echo(render(drift, exact=exact))
    raise typer.Exit(EXIT_FAILED if drift.failed(exact) else EXIT_OK)


@app.command("diff-env")
def diff_env(
    a: Annotated[str, typer.Argument(help="An env of locks/, a lock.json, or a closure hash.")],
    b: Annotated[str, typer.Argument(help="The same, for the other side.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """What differs between two locks, most likely to matter for a kernel first (Python, CUDA
    toolchain, torch stack, the env's own packages, source builds, build flags, base, the rest);
    a closure hash is looked up in git history too. Exit 0 identical, 1 different."""
    import json

    from envaudit.lock.diff import diff_locks, render_diff
    from envaudit.lock.history import find_lock

    with _reported():
        result = diff_locks(find_lock(a, locks_dir), find_lock(b, locks_dir))
    text = json.dumps(result.as_dict(), indent=1) + "\n" if as_json else render_diff(result)
    typer.echo(text, nl=False)
    raise typer.Exit(EXIT_OK if result.identical else EXIT_FAILED)


@base_app.command("build")
def base_build(
    name: Annotated[str, typer.Argument(help="Base recipe under containers/bases.")],
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Build it even if it exists.")] = False,
) -> None:
    """Build an offline base image (debootstrap rootfs + docker import)."""
    from envaudit.image.base import build_base, load_recipe
    from envaudit.image.engine import Engine

    started = time.monotonic()
    with _reported(), _status(f"debootstrap of {name}") as status:
        recipe = load_recipe(name)
        image, built = build_base(Engine.connect(), recipe, status, rebuild=rebuild)
    verb = "built" if built else "already built"
    manifest = image.labels.get("dev.envaudit.base-manifest-sha256", "?")
    typer.echo(
        f"{recipe.tag}: {verb} in {time.monotonic() - started:.1f} s; image {image.id[:19]},"
        f" {image.size / 1e6:.0f} MB, package manifest sha256 {manifest}"
    )


@app.command()
def build(
    solution: Annotated[
        str | None,
        typer.Option("--solution", help="A solution, or an env name (its solutions' image)."),
    ] = None,
    env: Annotated[str | None, typer.Option("--env", help="An env under locks/.")] = None,
    all_envs: Annotated[
        bool, typer.Option("--all", help="Every env a shipped solution declares.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the Dockerfile and staged files only.")
    ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every step.")] = False,
    over: OverOption = None,
    locks_dir: LocksDir = Path("locks"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Build one image per lock, tagged by closure hash; a no-op when it exists."""
    from envaudit.image.build import build_image, build_overlay, plan_build
    from envaudit.runtime.selection import envs_to_build

    _names([solution] if solution is not None else [], "--solution")
    with _reported():
        envs = envs_to_build(solution, env, all_envs, locks_dir, solutions_root)
        plans = [plan_build(name, locks_dir) for name in envs]
    if over is not None and not dry_run:
        from envaudit.image.engine import Engine
        from envaudit.lock.config import FetchConfig

        with _reported(), _status(f"over {over}") as status:
            engine = Engine.connect()
            for name in envs:
                done, overlay = build_overlay(
                    name, over, engine, FetchConfig.from_environment(), locks_dir, no_cache, status
                )
                verb = "built" if done.built else "up to date"
                typer.echo(
                    f"{done.tag}: {verb} in {done.seconds:.1f} s; image {done.image.id[:19]},"
                    f" {done.image.size / 1e9:.2f} GB"
                    + (f"; base verified: {overlay.verified}" if overlay else "")
                )
        raise typer.Exit(EXIT_OK)
    if dry_run:
        for plan in plans:
            typer.echo(f"# ---- {plan.image.env}: {plan.image.tag}")
            typer.echo(plan.dockerfile)
            typer.echo(f"# ---- staged build context of {plan.image.env}:")
            for item in plan.files():
                size = f"{item.size:>12,}" if item.size is not None else f"{'':>12}"
                typer.echo(f"#  {size}  {item.path}  ({item.what})")
        raise typer.Exit(EXIT_OK)
    from envaudit.image.engine import Engine
    from envaudit.lock.config import FetchConfig

    failed = 0
    with _reported():
        engine = Engine.connect()
    for plan in plans:
        try:
            with _steps(plan.image.env) as (on_step, on_line):
                done = build_image(
                    plan, engine, FetchConfig.from_environment(), no_cache, on_step, on_line
                )
        except EnvauditError as exc:
            if len(plans) == 1:
                _render(exc)
            failed += 1
            for line in exc.rendered(plan.image.env):
                typer.echo(line, err=True)
            continue
        verb = "built" if done.built else "up to date"
        cached = f", {done.cached_steps}/{done.steps} steps cached" if done.built else ""
        typer.echo(
            f"{done.tag}: {verb} in {done.seconds:.1f} s; image {done.image.id[:19]},"
            f" {done.image.size / 1e6:.0f} MB{cached}"
        )
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


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
EnvOption = Annotated[
    str | None,
    typer.Option("--env", help="Run in this lock instead of the declared one (not host)."),
]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", help="Seconds per workload (> 0).", min=0.001)
]


def _runtime_choice(runtime: str | None, default: str) -> str:
    if runtime is not None:
        return runtime
    if default != "pick":
        return default
    from envaudit.runtime.registry import pick_runtime

    chosen, why = pick_runtime()
    typer.echo(f"runtime: {chosen} ({why})", err=True)
    return chosen


def _env_preparer(runtime: str, options: object) -> Callable[[str], str | None]:
    """A hook that makes an env ready in this runtime, returning why it cannot be had, or
    None."""

    def prepare(env: str) -> str | None:
        try:
            _make_env(runtime, options, env)
        except EnvauditError as exc:
            return exc.one_line()
        return None

    return prepare


def _make_env(runtime: str, options: object, env: str) -> None:
    """Make an env ready in this runtime (fetch, build) with progress on stderr; an
    EnvauditError (exit 2) when it cannot be had."""
    from envaudit.report.console import byte_progress
    from envaudit.runtime.registry import Progress, RunOptions, ensure_env

    assert isinstance(options, RunOptions)
    with _steps(env) as (on_step, on_line), byte_progress() as on_fetch:
        note = ensure_env(runtime, env, options, Progress(on_fetch, on_step, on_line))
    if note:
        typer.echo(note, err=True)


@app.command()
@_evaluation_flags("run")
def run(
    solution: Annotated[
        str | None, typer.Option("--solution", help="Solution name under solutions/.")
    ] = None,
    candidate: Annotated[
        Path | None,
        typer.Option(
            "--candidate",
            help="A main.py that is not a solution folder, run for --definition (nothing is"
            " written into solutions/).",
        ),
    ] = None,
    definition: Annotated[
        str | None, typer.Option("--definition", help="The definition a --candidate implements.")
    ] = None,
    workload: Annotated[
        list[str] | None, typer.Option("--workload", help="Only this workload UUID.")
    ] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="smoke, dev, all, ...")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID (GPU-...).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: RunRuntimeOption = None,
    env: EnvOption = None,
    over: OverOption = None,
    reference_cache: Annotated[Path | None, typer.Option("--reference-cache", parser=_path)] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Result lines file.", parser=_path)
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Skip workloads that have a line in --report (same solution, closure, device).",
        ),
    ] = False,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    evaluation: EvalOptions = FROM_FLAGS,
) -> None:
    """Validate and time one solution on its definition's workloads (default runtime: host)."""
    from envaudit.report.console import print_run_summary
    from envaudit.runtime.jobs import RunRequest
    from envaudit.runtime.registry import RunOptions, plan_run, run_planned

    chosen = _runtime_choice(runtime, "host")
    _names([solution] if solution is not None else [], "--solution")
    workload = _names(workload, "--workload", plain=False)
    if (solution is None) == (candidate is None):
        _error("give either --solution NAME or --candidate PATH --definition NAME")
    if candidate is not None:
        from envaudit.runtime.candidate import stage_candidate

        if definition is None:
            _error("--candidate needs --definition NAME (the definition it implements)")
        with _reported():
            solution, solutions_root = stage_candidate(
                candidate, definition, data_root, solutions_root, env
            )
    elif definition is not None:
        _error("--definition goes with --candidate (a solution names its own definition)")
    assert solution is not None
    request = RunRequest(
        solution=solution,
        data_root=data_root,
        solutions_root=solutions_root,
        workloads=workload or [],
        suite=suite,
        device=device,
        gpu=gpu,
        evaluation=evaluation,
        reference_cache=reference_cache,
        report=report,
    )
    options = RunOptions(
        env=env, over=over, workload_timeout_s=_finite(timeout, "--timeout"), resume=resume
    )
    with _reported():
        job = plan_run(request, chosen, options)
        declared = env or job.context.declared_env
        if declared:
            _make_env(chosen, options, declared)
        job, result = run_planned(job, options)
    failed = print_run_summary(job.report, job.solution, result)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
def reproduce(
    line: Annotated[
        str,
        typer.Argument(
            help="A result or trace file and line number (FILE:N), or a file with --solution"
            " and --workload."
        ),
    ],
    solution: Annotated[str | None, typer.Option("--solution", help="Pick by solution.")] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="Pick by workload UUID or label.")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="This GPU (default: the first of the model).")
    ] = None,
    other_driver: Annotated[
        bool, typer.Option("--other-driver", help="Run on a GPU with another driver too.")
    ] = False,
    runtime: RuntimeOption = None,
    over: OverOption = None,
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder for the new line (reproduce.jsonl).", parser=_path),
    ] = Path("results/reproduce"),
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Run a recorded line again in what it records (its lock by closure hash and its solution
    revision by hash, from git history when they moved on; a GPU of its model) and print both
    side by side with the time ratio now/then and its interval. Exit 0 when it reproduces within
    noise, 1 when it does not, 2 when it cannot be attempted."""
    from envaudit.report.side_by_side import (
        as_json as comparison_json,
    )
    from envaudit.report.side_by_side import (
        compare_runs,
        read_recorded,
        render_comparison,
        reproduced,
    )
    from envaudit.runtime.registry import RUNTIME_NAMES, RunOptions
    from envaudit.runtime.reproduce import plan_reproduction, run_reproduction, scratch_folder

    with _reported():
        recorded, where = read_recorded(line, solution, workload)
        context = recorded.context
        ran_in = str(context.runtime or "")  # a trace's is "flashinfer-bench"
        chosen = _runtime_choice(runtime, ran_in if ran_in in RUNTIME_NAMES else "host")
        plan = plan_reproduction(
            recorded, data_root, solutions_root, locks_dir, scratch_folder(), gpu, other_driver
        )
        if chosen == "host":  # this interpreter as it is: the lock is checked, not made
            plan = replace(plan, env=None, notes=[*plan.notes, "runtime: host (this interpreter)"])
        recorded_over = context.env_check.overlay_on if context.env_check else None
        options = RunOptions(
            over=over or (recorded_over if chosen in ("docker", "podman") else None),
            workload_timeout_s=_finite(timeout, "--timeout"),
            locks_dir=plan.locks_dir,
        )
        if plan.env:
            _make_env(chosen, replace(options, env=plan.env), plan.env)
        out.mkdir(parents=True, exist_ok=True)
        now = run_reproduction(plan, chosen, options, out / "reproduce.jsonl")
    comparison = compare_runs(recorded, now)
    notes = [f"recorded: {where}", *plan.notes]
    typer.echo(
        comparison_json(comparison, notes) if as_json else render_comparison(comparison, notes),
        nl=False,
    )
    raise typer.Exit(reproduced(comparison))


def _finite(value: float, option: str) -> float:
    import math

    if not math.isfinite(value) or value <= 0:
        _error(f"{option} must be a positive number of seconds, got {value}")
    return value


@app.command()
@_evaluation_flags("audit")
def audit(
    solution: Annotated[
        list[str] | None, typer.Option("--solution", help="Only these (default: all).")
    ] = None,
    candidate: Annotated[
        Path | None,
        typer.Option("--candidate", help="A main.py run beside --definition's solutions."),
    ] = None,
    definition: Annotated[
        str | None, typer.Option("--definition", help="The definition a --candidate implements.")
    ] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", help="GPU UUID (repeatable).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: RuntimeOption = None,
    env: EnvOption = None,
    over: OverOption = None,
    executor: Annotated[
        str, typer.Option("--executor", help="local, or slurm (one job array).")
    ] = "local",
    partition: Annotated[str | None, typer.Option("--partition", help="slurm.")] = None,
    account: Annotated[str | None, typer.Option("--account", help="slurm.")] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time-limit", help="slurm: per task (`30`, `1:00:00`).")
    ] = None,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="slurm: resubmissions of a failed task.")
    ] = 2,
    shard: Annotated[
        int, typer.Option("--shard", min=0, help="slurm: workloads per task (0: a solution's all).")
    ] = 0,
    suite: Annotated[
        str | None, typer.Option("--suite", help="Default: dev on a GPU, smoke on the CPU.")
    ] = None,
    out: Annotated[Path, typer.Option("--out", parser=_path)] = Path("results/audit"),
    resume: Annotated[bool, typer.Option("--resume")] = False,
    each_gpu: Annotated[
        bool,
        typer.Option(
            "--each-gpu",
            help="Every solution on every --gpu (to compare cards), not once per GPU model.",
        ),
    ] = False,
    cpu_jobs: Annotated[
        int,
        typer.Option("--cpu-jobs", min=1, help="CPU audits: jobs at once (timings share the CPU)."),
    ] = 1,
    gpu_wait: Annotated[
        float,
        typer.Option(
            "--gpu-wait", min=0, help="Seconds a job waits for a GPU another process holds."
        ),
    ] = 0.0,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    evaluation: EvalOptions = FROM_FLAGS,
) -> None:
    """Run every solution on the chosen GPUs (or the CPU); all lines go to OUT/results.jsonl.
    GPUs of one model share the jobs, one at a time each, longest first (--each-gpu: every
    solution on every GPU). Container runtimes build the images that are missing first."""
    from envaudit.runtime.audit import AuditPlan, all_solutions, run_audit
    from envaudit.runtime.registry import RunOptions

    if executor not in ("local", "slurm"):
        _error(f"no executor {executor}", "use --executor local or --executor slurm")
    if gpu and device:
        _error("give either --gpu or --device, not both")
    devices: list[tuple[str | None, str | None]] = [(g, None) for g in gpu or []]
    if not devices:
        devices = [(None, device if device is not None else "cpu")]
    chosen = _runtime_choice(runtime, "pick")
    options = RunOptions(
        env=env,
        over=over,
        workload_timeout_s=_finite(timeout, "--timeout"),
        resume=resume,
        gpu_wait_s=gpu_wait,
    )
    names = _names(solution, "--solution")
    if (candidate is None) != (definition is None):
        _error("--candidate PATH and --definition NAME go together")
    if candidate is not None and definition is not None:
        from envaudit.runtime.candidate import stage_beside

        with _reported():
            names, solutions_root = stage_beside(
                candidate, definition, data_root, solutions_root, env, names
            )
    plan = AuditPlan(
        solutions=names or all_solutions(solutions_root),
        devices=devices,
        out=out,
        runtime=chosen,
        options=options,
        data_root=data_root,
        solutions_root=solutions_root,
        suite=suite,
        evaluation=replace(evaluation, graph_timing=True),
        each_gpu=each_gpu,
        cpu_jobs=cpu_jobs,
    )
    with _reported():
        if executor == "slurm":
            from envaudit.runtime.audit import run_slurm_audit
            from envaudit.runtime.slurm import SlurmSettings

            settings = SlurmSettings(partition, account, time_limit, retries, shard=shard)
            result = run_slurm_audit(plan, settings, typer.echo, _env_preparer(chosen, options))
        else:
            result = run_audit(
                plan,
                lambda name, where: typer.echo(f"audit: {name} on {where}"),
                _env_preparer(chosen, options),
            )
    for error in result.errors:
        typer.echo(f"error: {error}", err=True)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.statuses.items()))
    typer.echo(f"{sum(result.statuses.values())} result lines in {result.report}: {counts}")
    if result.superseded:
        typer.echo(f"({result.superseded} older lines of the same keys not counted)")
    raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)


@app.command()
def merge(
    files: Annotated[list[Path], typer.Argument(help="Result files to merge.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the report.", parser=_path)] = Path(
        "docs"
    ),
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Merge result files (ours or FlashInfer-Bench traces) into results.jsonl, summary.json,
    performance.md, preferred-solutions.json, interfaces.json, plots/ and traces/."""
    from envaudit.report.build import ReportError, build_report

    command = "envaudit merge " + " ".join(str(f) for f in files) + f" --out {out}"
    try:
        outcome = build_report(files, out, data_root, solutions_root, command)
    except ReportError as exc:
        _render(exc)
    merged = outcome.merged
    for finding in merged.findings:
        typer.echo(f"warning: {finding.render()}", err=True)
    for conflict in merged.conflicts:
        typer.echo(f"conflict: {conflict.render()}", err=True)
    typer.echo(
        f"merged {len(merged.lines)} lines from {len(files)} files ({merged.repeats} repeats,"
        f" {len(merged.conflicts)} conflicts, {len(merged.findings)} findings);"
        f" {len(outcome.written)} files under {out}"
    )


@app.command("export-solutions")
def export_solutions_command(
    out: Annotated[
        Path, typer.Option("--out", help="Root to write solutions/ under.", parser=_path)
    ],
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Write every solution as a FlashInfer-Bench Solution, sources inlined, under
    OUT/solutions/<author>/<op_type>/<definition>/<name>.json."""
    from envaudit.report.solutions import export_solutions

    with _reported():
        written = export_solutions(solutions_root, data_root, out)
    typer.echo(f"{len(written)} solutions written under {out / 'solutions'}")


@app.command()
def upstreams(
    offline: Annotated[
        bool, typer.Option("--offline", help="Ask nothing; list every pin as not checked.")
    ] = False,
    locks_dir: Annotated[Path, typer.Option("--locks-dir", help="Folder of lock dirs.")] = Path(
        "locks"
    ),
    out: Annotated[Path, typer.Option("--out", help="Report file (JSON).", parser=_path)] = Path(
        "docs/upstreams.json"
    ),
) -> None:
    """Pinned versions and commits vs what registries and remotes have now."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.upstreams import check_upstreams, render, write_upstreams

    with _reported():
        config = FetchConfig.from_environment(offline=offline)
        with _progress("asking the index and git remotes", quiet=offline) as progress:
            report = check_upstreams(locks_dir, config, offline, progress)
        write_upstreams(report, out)
    typer.echo(render(report))
    typer.echo(f"written to {out}")


@contextmanager
def _progress(what: str, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A transient progress bar on stderr, fed (done, total) by the layer below."""
    if quiet:
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def _status(what: str) -> Iterator[Callable[[str], None]]:
    """A transient status line on stderr showing the latest line of a long step."""
    from rich.console import Console

    console = Console(stderr=True)
    with console.status(what) as status:
        yield lambda line: status.update(f"{what}: {line[:100]}")


@contextmanager
def _steps(
    env: str,
) -> Iterator[tuple[Callable[[int, int, str], None], Callable[[str], None]]]:
    """Progress of an image build: a bar over the Dockerfile's steps, and the base's lines."""
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"building {env}", total=None)

        def on_step(done: int, total: int, text: str) -> None:
            bar.update(task, completed=done - 1, total=total, description=f"{env}: {text[:60]}")

        def on_line(line: str) -> None:
            bar.update(task, description=f"{env} base: {line[:60]}")

        yield on_step, on_line
