"""The command line's terminal output: a run's summary read back from the lines it wrote, and
the transient progress bars and status lines of long steps (on stderr)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from envaudit.commands.environments import OnFetch, OnLine, OnStep, env_maker

if TYPE_CHECKING:  # the image layer brings the Docker SDK, the line's models pydantic: a command's
    # start pays for neither (a run on the host uses no image; its summary is read at the end)
    from envaudit.commands.audit import AuditResult
    from envaudit.commands.build import BuildPlan, BuildResult
    from envaudit.schema.result_line import ResultLine


@dataclass(frozen=True)
class RunRow:
    """One workload of a run, as its summary shows it (the newest line of that workload)."""

    workload: str
    label: str
    status: str
    eager_median_ms: float | None
    graph_median_ms: float | None
    message: str

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"


def run_rows(report: Path, solution: str, written: set[str], skipped: list[str]) -> list[RunRow]:
    """The newest line of each workload this run wrote or --resume kept, in the report's order."""
    wanted = written | set(skipped)  # --resume: the kept lines count too
    from envaudit.schema.result_line import result_lines

    latest: dict[str, ResultLine] = {}
    for _, line in result_lines(report):
        if line is not None and line.solution == solution and line.workload.uuid in wanted:
            latest[line.workload.uuid] = line
    return [
        RunRow(
            uuid,
            line.workload.label or uuid[:8],
            line.status,
            line.median("eager"),
            line.median("graph"),
            line.message.splitlines()[0] if line.message else "",
        )
        for uuid, line in latest.items()
    ]


def print_run_summary(
    report: Path,
    rows: list[RunRow],
    skipped: list[str],
    console: Console | None = None,
) -> None:
    """Print one row per workload of this run."""
    console = console or Console(highlight=False, width=120)
    table = Table(title=f"{len(rows)} workloads -> {report}")
    for column in ("workload", "status", "eager median ms", "graph median ms", "message"):
        table.add_column(column)
    for row in rows:
        eager, graph = row.eager_median_ms, row.graph_median_ms
        table.add_row(
            row.label,
            row.status,
            f"{eager:.4f}" if eager is not None else "",
            f"{graph:.4f}" if graph is not None else "",
            row.message[:60],
        )
    console.print(table)
    if skipped:
        console.print(f"{len(skipped)} workloads skipped (--resume: already in the report)")


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
    """The jobs that could not run (stderr), the count of lines by status, then the command
    that makes the report of them."""
    for error in result.errors:
        typer.echo(f"error: {error}", err=True)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(result.statuses.items()))
    typer.echo(f"{sum(result.statuses.values())} result lines in {result.report}: {counts}")
    if result.superseded:
        typer.echo(f"({result.superseded} older lines of the same keys not counted)")
    report = result.report.parent / "report"
    typer.echo(f"the report: envaudit merge {result.report} --out {report}")


def statuses_text(statuses: Counter[str]) -> str:
    """ "4 PASSED, 1 INCORRECT_NUMERICAL", PASSED first; "no lines" for a job that wrote none."""
    if not statuses:
        return "no lines"
    order = sorted(statuses, key=lambda status: (status != "PASSED", status))
    return ", ".join(f"{statuses[status]} {status}" for status in order)


def duration_text(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


class AuditProgress:
    """An audit's jobs as they go (runtime/scheduling/audit.py JobProgress): on a terminal, a
    bar with the jobs done out of all and the time left, each job's outcome printed above it;
    elsewhere (a log, CI), one plain line as each job starts and one as it ends, with the
    count and an estimate of the time left (the mean job time so far over the jobs left).
    The bar starts when the jobs are planned: the envs' own bars (fetch, build) come before."""

    def __init__(self, console: Console, terminal: bool) -> None:
        self.console, self.terminal = console, terminal
        self.bar: Progress | None = None
        self.total = self.started_jobs = self.done = 0
        self.began = time.monotonic()
        self.guard = threading.Lock()
        self.task: TaskID | None = None

    def planned(self, jobs: int) -> None:
        with self.guard:
            self.total, self.began = jobs, time.monotonic()
            if self.terminal and self.bar is None:
                self.bar = Progress(*AUDIT_COLUMNS, console=self.console)
                self.bar.start()
                self.task = self.bar.add_task("audit", total=jobs)

    def close(self) -> None:
        """The bar (if any) stops, leaving its last state on the terminal."""
        with self.guard:
            if self.bar is not None:
                self.bar.stop()

    def started(self, name: str, where: str) -> None:
        with self.guard:
            self.started_jobs += 1
            if self.bar is not None and self.task is not None:
                self.bar.update(self.task, description=f"audit: {name} on {where}")
            else:
                line = f"audit [{self.started_jobs}/{self.total}]: {name} on {where}"
                self.console.print(line, soft_wrap=True)

    def ended(self, name: str, where: str, statuses: Counter[str], seconds: float) -> None:
        with self.guard:
            self.done += 1
            outcome = f"{statuses_text(statuses)} in {duration_text(seconds)}"
            if self.bar is not None and self.task is not None:
                self.bar.console.print(f"{name} on {where}: {outcome}")
                self.bar.advance(self.task)
                return
            left = self.total - self.done
            elapsed = time.monotonic() - self.began
            eta = f"; about {duration_text(elapsed / self.done * left)} left" if left else ""
            self.console.print(
                f"audit [{self.done}/{self.total} done]: {name} on {where}: {outcome}{eta}",
                soft_wrap=True,
            )


AUDIT_COLUMNS = (
    TextColumn("{task.description}"),
    BarColumn(),
    MofNCompleteColumn(),
    TimeElapsedColumn(),
    TextColumn("left"),
    TimeRemainingColumn(),
)


@contextmanager
def audit_progress() -> Iterator[AuditProgress]:
    """The audit's progress on stderr: a live bar on a terminal, plain lines otherwise."""
    console = Console(stderr=True, highlight=False)
    progress = AuditProgress(console, console.is_terminal)
    try:
        yield progress
    finally:
        progress.close()
