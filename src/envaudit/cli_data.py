"""The command line's dataset and report commands: check-inputs, merge, export-solutions.
`envaudit.cli` adds them to the one app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envaudit.cli_common import DataRoot, SolutionsRoot, parse_path, render, reported
from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError

data_app = typer.Typer()


@data_app.command("check-inputs")
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

    with reported():
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


@data_app.command()
def merge(
    files: Annotated[list[Path], typer.Argument(help="Result files to merge.")],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Folder for the report (the committed one: docs/report, `make report`).",
            parser=parse_path,
        ),
    ] = Path("results/report"),
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
        render(exc)
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


@data_app.command("export-solutions")
def export_solutions_command(
    out: Annotated[
        Path, typer.Option("--out", help="Root to write solutions/ under.", parser=parse_path)
    ],
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Write every solution as a FlashInfer-Bench Solution, sources inlined, under
    OUT/solutions/<author>/<op_type>/<definition>/<name>.json."""
    from envaudit.report.solutions import export_solutions

    with reported():
        written = export_solutions(solutions_root, data_root, out)
    typer.echo(f"{len(written)} solutions written under {out / 'solutions'}")
