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
from envaudit.schema.results import read_lines


def print_run_summary(
    report: Path, solution: str, result: BatchResult, console: Console | None = None
) -> bool:
    """Print one row per workload of this run; return True when any workload failed."""
    console = console or Console(highlight=False, width=120)
    wanted = result.written | set(result.skipped)  # --resume: the kept lines count too
    latest = {}
    for _, line in read_lines(report):
        if line and line.get("solution") == solution:
            uuid = line.get("workload", {}).get("uuid")
            if uuid in wanted:
                latest[uuid] = line
    table = Table(title=f"{len(latest)} workloads -> {report}")
    for column in ("workload", "status", "eager median ms", "graph median ms", "message"):
        table.add_column(column)
    failed = False
    for uuid, line in latest.items():
        timing = line.get("timing") or {}
        eager, graph = timing.get("eager") or {}, timing.get("graph") or {}
        failed |= line["status"] != "PASSED"
        label = line["workload"].get("label") or uuid[:8]
        message = (line.get("message") or "").splitlines()[0][:60] if line.get("message") else ""
        table.add_row(
            label,
            line["status"],
            f"{eager['median_ms']:.4f}" if eager else "",
            f"{graph['median_ms']:.4f}" if graph else "",
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
