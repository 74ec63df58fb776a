"""A short console summary of a run, read back from the result lines it wrote."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

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

from envaudit.runtime.supervisor import BatchResult
from envaudit.schema.result_line import ResultLine, result_lines


def print_run_summary(
    report: Path, solution: str, result: BatchResult, console: Console | None = None
) -> bool:
    """Print one row per workload of this run; return True when any workload failed."""
    console = console or Console(highlight=False, width=120)
    wanted = result.written | set(result.skipped)  # --resume: the kept lines count too
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
    if result.skipped:
        console.print(f"{len(result.skipped)} workloads skipped (--resume: already in the report)")
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
