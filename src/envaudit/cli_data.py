"""The command line's dataset and report commands: check-inputs, merge, export-solutions and
compare. `envaudit.cli` adds them to the one app."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envaudit.cli_common import DataRoot, SolutionsRoot, parse_path, reported, usage_error
from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError

if TYPE_CHECKING:
    from envaudit.report.compare import Comparison

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
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
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
    failed = bool(report.errors or (strict and report.warnings))
    if as_json:
        answer = {
            "data_root": str(data_root),
            "summary": report.summary(),
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "failed": failed,
            "findings": [dataclasses.asdict(f) for f in report.findings],
        }
        typer.echo(json.dumps(answer, indent=1))
        raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)
    for finding in report.findings:
        typer.echo(finding.render())
    typer.echo(report.summary())
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


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
) -> None:
    """Merge result files (ours or FlashInfer-Bench traces) into results.jsonl, summary.json,
    performance.md, preferred-solutions.json, interfaces.json, plots/ and traces/."""
    from envaudit.lock.history import stand_in_notes
    from envaudit.report.build import build_report

    command = "envaudit merge " + " ".join(str(f) for f in files) + f" --out {out}"
    with reported():
        outcome = build_report(
            files, out, data_root, solutions_root, command, stand_in_notes, accept_newer
        )
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


@data_app.command()
def compare(
    before: Annotated[
        Path, typer.Argument(help="Result file, report folder or trace file of the base.")
    ],
    after: Annotated[Path, typer.Argument(help="The same, of the change.")],
    threshold: Annotated[
        float,
        typer.Option(
            "--threshold",
            metavar="PCT",
            help="Slower/faster only when the 95% interval of after/before lies wholly beyond"
            " 1 ± PCT/100 (0: beyond noise at all).",
        ),
    ] = 0.0,
    across_envs: Annotated[
        bool,
        typer.Option("--across-envs", help="Pair lines of different envs (the env is no key)."),
    ] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="A Markdown table (GitHub step summary, PR).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
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
    from envaudit.report import compare as comparing

    if markdown and as_json:
        usage_error("--markdown and --json both name the output; give one")
    with reported():
        sides = (
            comparing.read_side(before, across_envs, accept_newer),
            comparing.read_side(after, across_envs, accept_newer),
        )
        result = comparing.compare_sides(*sides, threshold_pct=threshold, across_envs=across_envs)
        if junit is not None:
            comparing.write_junit(result, junit)
    for side in sides:
        for finding in side.findings:
            typer.echo(f"warning: {finding}", err=True)
    if markdown:
        typer.echo(comparing.render_markdown(result), nl=False)
    elif as_json:
        typer.echo(comparing.render_json(result), nl=False)
    else:
        _print_comparison(result)
    raise typer.Exit(result.exit_code)


def _print_comparison(result: Comparison) -> None:
    """The pairs as a terminal table (regressions first), the notes, the summary line."""
    from rich.console import Console
    from rich.table import Table

    from envaudit.report.compare import env_text, ratio_text, status_text, verdict_text

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 140)
    table = Table()
    for column in ("verdict", "solution", "workload", "env", "status", "after/before [95%]"):
        table.add_column(column, overflow="fold")  # a name is never cut
    table.add_column("timing")
    for pair in result.pairs:
        style = VERDICT_STYLES.get(pair.verdict, "")
        table.add_row(
            f"[{style}]{verdict_text(pair)}[/]" if style else verdict_text(pair),
            pair.solution,
            pair.label or pair.workload,
            env_text(pair),
            status_text(pair),
            ratio_text(pair),
            pair.mode or "–",
        )
    console.print(table)
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
