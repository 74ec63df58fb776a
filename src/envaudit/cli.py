"""The `envaudit` command line: thin Typer commands over the layers below. No logic lives here."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from envaudit import __version__

app = typer.Typer(
    name="envaudit",
    help="Validate and time kernel solutions, each in the exact environment it declares.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
base_app = typer.Typer(help="Offline base images built from containers/.", no_args_is_help=True)
app.add_typer(base_app, name="base")

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

DataRoot = Annotated[
    Path, typer.Option("--data-root", help="TraceSet root (definitions/, workloads/, blob/).")
]


def _error(message: str, hint: str | None = None) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"hint: {hint}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _not_built(command: str, issue: str) -> NoReturn:
    _error(f"`envaudit {command}` is not built yet ({issue}).")


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

    try:
        report = run_checks(data_root, definition or [])
    except DatasetRootError as exc:
        _error(str(exc), "pass --data-root pointing at a folder holding definitions/")
    for finding in report.findings:
        typer.echo(finding.render())
    typer.echo(report.summary())
    failed = report.errors or (strict and report.warnings)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
def doctor() -> None:
    """What is available here: engine, GPUs, runtimes, uv, disk; which runtime `audit` picks."""
    _not_built("doctor", "planned with the container runtime issue")


LocksDir = Annotated[Path, typer.Option("--locks-dir", help="Folder of <env>/env.toml.")]


def _lock_error(exc: Exception) -> NoReturn:
    """Print a LockError the way every command does and exit with its code."""
    from envaudit.lock.files import LockError

    assert isinstance(exc, LockError)
    typer.echo(f"error: {exc}", err=True)
    if exc.hint:
        typer.echo(f"hint: {exc.hint}", err=True)
    raise typer.Exit(exc.exit_code)


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
    if not names:
        _error("name at least one environment, or pass --all")
    if no_build and rebuild:
        _error("--rebuild and --no-build contradict each other")
    stale = 0
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
                f"{name}: {len(sealed.packages)} packages, closure {sealed.closure_hash[:16]}"
                f" -> {path}"
            )
        except LockError as exc:
            if check and exc.exit_code == 1:
                stale += 1
                typer.echo(f"{name}: refused: {exc}")
                continue
            _lock_error(exc)
    raise typer.Exit(EXIT_FAILED if stale else EXIT_OK)


@app.command()
def fetch(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    offline: Annotated[bool, typer.Option("--offline", help="Use only the store.")] = False,
    store: Annotated[
        Path | None, typer.Option("--store", help="Store folder (default: ENVAUDIT_STORE).")
    ] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Also look in this folder.")
    ] = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Put every artifact of a lock into the content-addressed store, sha256-verified."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.fetch import fetch_lock
    from envaudit.lock.files import LockError, env_dir
    from envaudit.lock.resolve import current_lock
    from envaudit.report.console import byte_progress

    config = FetchConfig.from_environment(store, find_links, offline=offline)
    try:
        locked = current_lock(env_dir(env, locks_dir))
        with byte_progress() as progress:
            report = fetch_lock(locked, config, progress)
    except LockError as exc:
        _lock_error(exc)
    for filename, origin in report.fetched:
        typer.echo(f"fetched {filename} ({origin})")
    for message in report.missing:
        typer.echo(f"missing: {message}", err=True)
    typer.echo(
        f"{env}: {len(report.present)} already in the store, {len(report.fetched)} fetched,"
        f" {len(report.missing)} missing; store {config.store}"
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
    from envaudit.lock.files import LockError, env_dir, load_lock
    from envaudit.lock.verify import compare, installed_distributions, python_version, render

    try:
        locked = load_lock(env_dir(env, locks_dir))
        interpreter = python or sys.executable
        installed = installed_distributions(interpreter)
        drift = compare(
            locked,
            installed,
            store or FetchConfig.from_environment().store,
            python_version(interpreter),
        )
    except LockError as exc:
        _lock_error(exc)
    typer.echo(render(drift, exact=exact))
    raise typer.Exit(EXIT_FAILED if drift.failed(exact) else EXIT_OK)


@base_app.command("build")
def base_build(name: Annotated[str, typer.Argument(help="Base recipe under containers/.")]) -> None:
    """Build an offline base image (debootstrap rootfs + docker import)."""
    _not_built("base build", "planned with the image issue")


@app.command()
def build(
    solution: Annotated[str | None, typer.Option("--solution")] = None,
    env: Annotated[str | None, typer.Option("--env")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache")] = False,
) -> None:
    """Build one image per lock, tagged by closure hash."""
    _not_built("build", "planned with the image issue")


@app.command()
def run(
    solution: Annotated[str, typer.Option("--solution", help="Solution name under solutions/.")],
    workload: Annotated[
        list[str] | None, typer.Option("--workload", help="Only this workload UUID.")
    ] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="smoke, dev, all, ...")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID (GPU-...).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: Annotated[
        str,
        typer.Option("--runtime", help="host (this interpreter) or local (uv env from the lock)."),
    ] = "host",
    env: Annotated[
        str | None,
        typer.Option(
            "--env", help="local: run in this lock instead of the solution's declared env."
        ),
    ] = None,
    validation_only: Annotated[bool, typer.Option("--validation-only")] = False,
    graph_timing: Annotated[bool, typer.Option("--graph-timing")] = False,
    reference_cache: Annotated[Path | None, typer.Option("--reference-cache")] = None,
    report: Annotated[Path | None, typer.Option("--report", help="Result lines file.")] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Skip lines already in --report.")
    ] = False,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds per workload.")] = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: Annotated[Path, typer.Option("--solutions-root")] = Path("solutions"),
) -> None:
    """Validate and time one solution on its definition's workloads."""
    from envaudit.runtime.host import run_on_host
    from envaudit.runtime.jobs import RunRequest, RunRequestError

    if runtime not in ("host", "local"):
        _error(f"runtime {runtime} is not built yet; use --runtime host or local")
    if env is not None and runtime != "local":
        _error("--env applies to --runtime local only")
    request = RunRequest(
        solution=solution,
        data_root=data_root,
        solutions_root=solutions_root,
        workloads=workload or [],
        suite=suite,
        device=device,
        gpu=gpu,
        validation_only=validation_only,
        graph_timing=graph_timing,
        reference_cache=reference_cache,
        report=report,
        runtime=runtime,
    )
    try:
        if runtime == "local":
            from envaudit.lock.config import FetchConfig
            from envaudit.lock.files import LockError
            from envaudit.runtime.local import run_in_local_environment

            try:
                job, result = run_in_local_environment(
                    request,
                    env,
                    FetchConfig.from_environment(),
                    resume=resume,
                    workload_timeout_s=timeout,
                )
            except LockError as exc:
                _lock_error(exc)
        else:
            job, result = run_on_host(request, resume=resume, workload_timeout_s=timeout)
    except RunRequestError as exc:
        _error(str(exc))
    from envaudit.report.console import print_run_summary

    failed = print_run_summary(Path(str(job["report"])), str(job["solution"]), result)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
def audit(
    solution: Annotated[
        list[str] | None, typer.Option("--solution", help="Only these (default: all).")
    ] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", help="GPU UUID (repeatable).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: Annotated[str, typer.Option("--runtime", help="host or local.")] = "host",
    env: Annotated[
        str | None,
        typer.Option("--env", help="local: every solution in this lock, not its declared one."),
    ] = None,
    executor: Annotated[str, typer.Option("--executor")] = "local",
    suite: Annotated[
        str | None, typer.Option("--suite", help="Default: dev on a GPU, smoke on the CPU.")
    ] = None,
    out: Annotated[Path, typer.Option("--out")] = Path("results/audit"),
    resume: Annotated[bool, typer.Option("--resume")] = False,
    data_root: DataRoot = Path("workloads"),
    solutions_root: Annotated[Path, typer.Option("--solutions-root")] = Path("solutions"),
) -> None:
    """Run every solution on the chosen GPUs (or the CPU); all lines go to OUT/results.jsonl."""
    from envaudit.runtime.audit import AuditPlan, all_solutions, run_audit

    if runtime not in ("host", "local") or executor != "local":
        _error("only --runtime host or local with --executor local are built yet")
    if env is not None and runtime != "local":
        _error("--env applies to --runtime local only")
    if gpu and device:
        _error("give either --gpu or --device, not both")
    devices: list[tuple[str | None, str | None]] = [(g, None) for g in gpu or []]
    if not devices:
        devices = [(None, device or "cpu")]
    plan = AuditPlan(
        solutions=solution or all_solutions(solutions_root),
        devices=devices,
        out=out,
        data_root=data_root,
        solutions_root=solutions_root,
        suite=suite,
        resume=resume,
        runtime=runtime,
        env=env,
    )
    result = run_audit(plan, lambda name, where: typer.echo(f"audit: {name} on {where}"))
    for error in result.errors:
        typer.echo(f"error: {error}", err=True)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.statuses.items()))
    typer.echo(f"{sum(result.statuses.values())} result lines in {result.report}: {counts}")
    raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)


@app.command()
def merge(
    files: Annotated[list[Path], typer.Argument(help="Result files to merge.")],
    out: Annotated[Path, typer.Option("--out", help="Folder for the report.")] = Path("docs"),
    data_root: DataRoot = Path("workloads"),
    solutions_root: Annotated[Path, typer.Option("--solutions-root")] = Path("solutions"),
) -> None:
    """Merge result files (ours or FlashInfer-Bench traces) into results.jsonl, summary.json,
    performance.md, preferred-solutions.json, interfaces.json, plots/ and traces/."""
    from envaudit.report.build import ReportError, build_report

    command = "envaudit merge " + " ".join(str(f) for f in files) + f" --out {out}"
    try:
        outcome = build_report(files, out, data_root, solutions_root, command)
    except ReportError as exc:
        _error(str(exc))
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
    if not merged.lines:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def upstreams(
    offline: Annotated[
        bool, typer.Option("--offline", help="Ask nothing; list every pin as not checked.")
    ] = False,
    locks_dir: Annotated[Path, typer.Option("--locks-dir", help="Folder of lock dirs.")] = Path(
        "locks"
    ),
    out: Annotated[Path, typer.Option("--out", help="Report file (JSON).")] = Path(
        "docs/upstreams.json"
    ),
) -> None:
    """Pinned versions and commits vs what registries and remotes have now."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.files import LockError
    from envaudit.lock.upstreams import check_upstreams, render, write_upstreams

    config = FetchConfig.from_environment(offline=offline)
    try:
        with _progress("asking the index and git remotes", quiet=offline) as progress:
            report = check_upstreams(locks_dir, config, offline, progress)
        write_upstreams(report, out)
    except LockError as exc:
        typer.echo(f"error: {exc}", err=True)
        if exc.hint:
            typer.echo(f"hint: {exc.hint}", err=True)
        raise typer.Exit(exc.exit_code) from None
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
