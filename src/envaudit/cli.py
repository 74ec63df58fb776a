"""The `envaudit` command line: thin Typer commands over the layers below. No logic lives here."""

from __future__ import annotations

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


@app.command()
def lock(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    check: Annotated[bool, typer.Option("--check", help="Fail if lock.json is stale.")] = False,
) -> None:
    """(Re)generate locks/ENV/lock.json from env.toml."""
    _not_built("lock", "issue 4")


@app.command()
def fetch(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    offline: Annotated[bool, typer.Option("--offline", help="Use only the store.")] = False,
) -> None:
    """Put every artifact of a lock into the content-addressed store, sha256-verified."""
    _not_built("fetch", "issue 4")


@app.command("verify-env")
def verify_env(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    python: Annotated[str | None, typer.Option("--python", help="Interpreter to inspect.")] = None,
) -> None:
    """Compare an installed environment with a lock; exit 1 on drift."""
    _not_built("verify-env", "issue 4")


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
    runtime: Annotated[str, typer.Option("--runtime", help="host (others: later).")] = "host",
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

    if runtime != "host":
        _error(f"runtime {runtime} is not built yet; use --runtime host")
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
    runtime: Annotated[str, typer.Option("--runtime")] = "host",
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

    if runtime != "host" or executor != "local":
        _error("only --runtime host with --executor local is built yet")
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
    out: Annotated[Path, typer.Option("--out")] = Path("docs"),
) -> None:
    """Merge result files into summary.json, performance.md, preferred-solutions.json, plots."""
    _not_built("merge", "issue 5")


@app.command()
def upstreams(offline: Annotated[bool, typer.Option("--offline")] = False) -> None:
    """Pinned versions and commits vs what registries and remotes have now."""
    _not_built("upstreams", "issue 4")
