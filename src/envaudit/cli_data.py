"""The command line's dataset and report commands: check-inputs, merge, export-solutions and
compare. `envaudit.cli` adds them to the one app."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envaudit.cli_common import (
    DataRoot,
    JsonOption,
    SolutionsRoot,
    ThresholdOption,
    json_text,
    parse_path,
    reported,
    usage_error,
)
from envaudit.errors import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from envaudit.commands.compare import CompareResult

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
    as_json: JsonOption = False,
) -> None:
    """Check every definition, workload, tensor path and blob of a TraceSet root."""
    from envaudit.commands.check_inputs import CheckInputsRequest, check_data_root

    with reported():
        result = check_data_root(
            CheckInputsRequest(data_root, tuple(definition or []), strict=strict)
        )
    if as_json:
        answer = {
            "data_root": str(result.data_root),
            "summary": result.summary,
            "errors": result.errors,
            "warnings": result.warnings,
            "failed": result.failed,
            "findings": [dataclasses.asdict(f) for f in result.findings],
        }
        typer.echo(json.dumps(answer, indent=1))
        raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)
    for finding in result.findings:
        typer.echo(finding.render())
    typer.echo(result.summary)
    raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)


AcceptNewer = Annotated[
    bool,
    typer.Option(
        "--accept-newer-schema",
        help="Read result lines of a schema version newer than this envaudit knows, as read"
        " (refused otherwise, exit 2).",
    ),
]


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
    accept_newer: AcceptNewer = False,
    as_json: JsonOption = False,
) -> None:
    """Merge result files (ours or FlashInfer-Bench traces) into results.jsonl, summary.json,
    performance.md, preferred-solutions.json, interfaces.json, plots/ and traces/."""
    from envaudit.commands.merge import MergeRequest, merge_results

    request = MergeRequest(
        files,
        out,
        data_root=data_root,
        solutions_root=solutions_root,
        accept_newer=accept_newer,
    )
    with reported():
        merged = merge_results(request)
    page = out / "report.html"
    if as_json:
        typer.echo(json_text({**dataclasses.asdict(merged), "report_html": page}))
        return
    for warning in merged.warnings:
        typer.echo(f"warning: {warning}", err=True)
    for conflict in merged.conflicts:
        typer.echo(f"conflict: {conflict}", err=True)
    typer.echo(
        f"merged {merged.lines} lines from {merged.inputs} files ({merged.repeats} repeats,"
        f" {len(merged.conflicts)} conflicts, {len(merged.warnings)} findings);"
        f" {len(merged.written)} files under {out}"
    )
    if page in merged.written or page.is_file():
        typer.echo(f"the report: {page} (open it in a browser)")


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
    from envaudit.commands.export_solutions import ExportRequest, export_all

    with reported():
        exported = export_all(
            ExportRequest(out, data_root=data_root, solutions_root=solutions_root)
        )
    typer.echo(f"{len(exported.written)} solutions written under {exported.folder}")


@data_app.command()
def compare(
    before: Annotated[
        Path, typer.Argument(help="Result file, report folder or trace file of the base.")
    ],
    after: Annotated[Path, typer.Argument(help="The same, of the change.")],
    threshold: ThresholdOption = 0.0,
    across_envs: Annotated[
        bool,
        typer.Option("--across-envs", help="Pair lines of different envs (the env is no key)."),
    ] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="A Markdown table (GitHub step summary, PR).")
    ] = False,
    as_json: JsonOption = False,
    junit: Annotated[
        Path | None,
        typer.Option("--junit", help="Also write JUnit XML here.", parser=parse_path),
    ] = None,
    accept_newer: AcceptNewer = False,
) -> None:
    """Pair the lines of BEFORE and AFTER by definition, solution, env and workload uuid and
    give each pair a verdict: faster, slower, within noise, newly failing, newly passing, lost
    (PASSED before, no line after), missing or timing flagged. Exit 1 on any slower, newly
    failing, lost or timing-flagged pair, 0 otherwise, 2 on unusable input."""
    from envaudit.commands.compare import CompareRequest, compare_results

    if markdown and as_json:
        usage_error("--markdown and --json both name the output; give one")
    request = CompareRequest(
        before,
        after,
        threshold_pct=threshold,
        across_envs=across_envs,
        accept_newer=accept_newer,
        junit=junit,
    )
    with reported():
        result = compare_results(request)
    for finding in result.findings:
        typer.echo(f"warning: {finding}", err=True)
    if markdown:
        typer.echo(result.markdown(), nl=False)
    elif as_json:
        typer.echo(result.json_text(), nl=False)
    else:
        _print_comparison(result)
    raise typer.Exit(result.exit_code)


def _print_comparison(result: CompareResult) -> None:
    """The pairs as a terminal table (regressions first), the notes, the summary line."""
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    table = Table()
    for column in ("verdict", "solution", "workload", "env", "status", "after/before [95%]"):
        table.add_column(column, overflow="fold")  # a name is never cut
    table.add_column("timing")
    for row in result.rows():
        style = VERDICT_STYLES.get(row.verdict, "")
        table.add_row(
            f"[{style}]{row.verdict_text}[/]" if style else row.verdict_text,
            row.solution,
            row.workload,
            row.env,
            row.status,
            row.ratio,
            row.timing,
        )
    console.print(table)
    for line in result.geomean_lines():
        console.print(line, markup=False, soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    console.print(result.summary_line(), markup=False, soft_wrap=True)


VERDICT_STYLES = {
    "newly failing": "bold red",
    "lost": "bold red",
    "slower": "red",
    "timing flagged": "bold red",
    "missing": "yellow",
    "newly passing": "green",
    "faster": "green",
    "still failing": "yellow",
}
