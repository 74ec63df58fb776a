"""The command line's terminal output: a run's summary read back from the lines it wrote, and
the transient progress bars and status lines of long steps (on stderr)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from envaudit.commands.environments import OnFetch, OnLine, OnStep, env_maker

if TYPE_CHECKING:  # the image layer brings the Docker SDK, the line's models pydantic: a command's
    # start pays for neither (a run on the host uses no image; its summary is read at the end)
    from envaudit.commands.audit import AuditResult
    from envaudit.commands.build import BuildPlan, BuildResult
    from envaudit.schema.result_line import ResultLine


def print_run_summary(
    report: Path,
    solution: str,
    written: set[str],
    skipped: list[str],
    console: Console | None = None,
) -> bool:
    """Print one row per workload of this run; return True when any workload failed."""
    console = console or Console(highlight=False, width=120)
    wanted = written | set(skipped)  # --resume: the kept lines count too
    from envaudit.schema.result_line import result_lines

    latest: dict[str, ResultLine] = {}
    for _, line in result_lines(report):
        if line is not None and line.solution == solution and line.workload.uuid in wanted:
            latest[line.workload.uuid] = line
    table = Table(title=f"{len(latest)} workloads -> {report}")
    for column in ("workload", "status", "eager median ms", "graph median ms", "message"):
        table.add_column(column)
    failed = False
    for uuid, line in latest.items():
        eager, graph = line.median("eager"), line.median("graph")
        failed |= not line.passed
        label = line.workload.label or uuid[:8]
        message = line.message.splitlines()[0][:60] if line.message else ""
        table.add_row(
            label,
            line.status,
            f"{eager:.4f}" if eager is not None else "",
            f"{graph:.4f}" if graph is not None else "",
            message,
        )
    console.print(table)
    if skipped:
        console.print(f"{len(skipped)} workloads skipped (--resume: already in the report)")
    return failed


@contextmanager
def byte_progress() -> Iterator[Callable[[str, int, int], None]]:
    """A rich progress bar per file being downloaded; yields the callback fetch reports to."""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
    )
    with Progress(*columns, transient=True, console=Console(stderr=True)) as bar:
        tasks: dict[str, TaskID] = {}

        def report(filename: str, done: int, total: int) -> None:
            if filename not in tasks:
                tasks[filename] = bar.add_task(filename, total=total)
            bar.update(tasks[filename], completed=done)

        yield report


@contextmanager
def progress_bar(what: str, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A transient progress bar on stderr, fed (done, total) by the layer below."""
    if quiet:
        yield None
        return
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


@contextmanager
def status_line(what: str) -> Iterator[Callable[[str], None]]:
    """A transient status line on stderr showing the latest line of a long step."""
    console = Console(stderr=True)
    with console.status(what) as status:
        yield lambda line: status.update(f"{what}: {line[:100]}")


@contextmanager
def build_steps(
    env: str,
) -> Iterator[tuple[Callable[[int, int, str], None], Callable[[str], None]]]:
    """Progress of an image build: a bar over the Dockerfile's steps, and the base's lines."""
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"building {env}", total=None)

        def on_step(done: int, total: int, text: str) -> None:
            bar.update(task, completed=done - 1, total=total, description=f"{env}: {text[:60]}")

        def on_line(line: str) -> None:
            bar.update(task, description=f"{env} base: {line[:60]}")

        yield on_step, on_line


def built_line(done: BuildResult, gigabytes: bool = False) -> str:
    """One line for an image a build made or found."""
    verb = "built" if done.built else "up to date"
    if gigabytes:
        return (
            f"{done.tag}: {verb} in {done.seconds:.1f} s; image {done.image.id[:19]},"
            f" {done.image.size / 1e9:.2f} GB"
        )
    cached = f", {done.cached_steps}/{done.steps} steps cached" if done.built else ""
    return (
        f"{done.tag}: {verb} in {done.seconds:.1f} s; image {done.image.id[:19]},"
        f" {done.image.size / 1e6:.0f} MB{cached}"
    )


def planned_build(plan: BuildPlan) -> str:
    """`build --dry-run`: the Dockerfile and the staged build context of one env."""
    lines = [f"# ---- {plan.image.env}: {plan.image.tag}", plan.dockerfile]
    lines.append(f"# ---- staged build context of {plan.image.env}:")
    files = plan.files()
    for item in files:
        size = f"{item.size:>12,}" if item.size is not None else f"{'':>12}"
        lines.append(f"#  {size}  {item.path}  ({item.what})")
    known = sum(item.size or 0 for item in files)
    lines.append(f"#  {known:>12,}  in all, out of the store (source trees and pins not counted)")
    return "\n".join(lines)


@contextmanager
def env_display(env: str) -> Iterator[tuple[OnFetch, OnStep, OnLine]]:
    """An env's preparation on stderr: a bar per download, a bar over the build's steps."""
    with build_steps(env) as (on_step, on_line), byte_progress() as on_fetch:
        yield on_fetch, on_step, on_line


make_env = env_maker(env_display, lambda note: typer.echo(note, err=True))
"""Make an env ready in a runtime (fetch, build) with progress on stderr; an EnvauditError
(exit 2) when it cannot be had (commands/environments.py)."""


def print_audit_summary(result: AuditResult) -> None:
    """The jobs that could not run (stderr), then the count of lines by status."""
    for error in result.errors:
        typer.echo(f"error: {error}", err=True)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.statuses.items()))
    typer.echo(f"{sum(result.statuses.values())} result lines in {result.report}: {counts}")
    if result.superseded:
        typer.echo(f"({result.superseded} older lines of the same keys not counted)")
