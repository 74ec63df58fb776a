"""`envaudit merge`: result files in, the whole report out.

Writes, under the output folder: results.jsonl (merged), summary.json, preferred-solutions.json,
performance.md, interfaces.json, plots/ and FlashInfer-Bench traces/. Every file is written to a
temporary name and renamed; the same inputs give the same bytes except the generation time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envaudit.dataset.interfaces import load_interfaces
from envaudit.dataset.traceset import DatasetRootError, load_traceset
from envaudit.report.markdown import render_markdown
from envaudit.report.merge import MergeResult, merge_files, write_results
from envaudit.report.plots import write_plots
from envaudit.report.summary import SolutionInfo, build_summary, preferred_solutions
from envaudit.report.traces import export_traces, trace_to_line
from envaudit.schema.paths import write_text_atomically
from envaudit.schema.results import now_iso


class ReportError(Exception):
    """Usage or environment problem (exit 2): unreadable data root, no inputs."""


@dataclass
class ReportOutcome:
    merged: MergeResult
    written: list[Path]


def build_report(
    inputs: Sequence[Path],
    out: Path,
    data_root: Path,
    solutions_root: Path,
    command: str,
) -> ReportOutcome:
    if not inputs:
        raise ReportError("no result files given")
    solutions = load_solutions(solutions_root)
    try:
        traceset = load_traceset(data_root)
    except DatasetRootError as exc:
        raise ReportError(str(exc)) from exc
    definitions = {
        name: d.definition.model_dump(mode="json") for name, d in traceset.definitions.items()
    }
    workloads = {w.uuid: w.trace.workload.model_dump(mode="json") for w in traceset.workloads}
    interfaces = [i.model_dump(mode="json") for _, i in sorted(load_interfaces(data_root).items())]
    merged = merge_files(inputs, convert=trace_to_line)
    summary = build_summary(merged, solutions, definitions)
    preferred = preferred_solutions(summary)
    generated_at = now_iso()
    written = [out / "results.jsonl"]
    write_results(merged.lines, written[0])
    for name, payload in (
        ("summary.json", {"generated_at": generated_at, **summary}),
        ("preferred-solutions.json", {"generated_at": generated_at, **preferred}),
        ("interfaces.json", {"interfaces": interfaces}),
    ):
        written.append(out / name)
        write_text_atomically(written[-1], json.dumps(payload, indent=1, sort_keys=True) + "\n")
    markdown = render_markdown(summary, preferred, interfaces, command, generated_at)
    written.append(out / "performance.md")
    write_text_atomically(written[-1], markdown)
    written += write_plots(summary, out)
    written += export_traces(merged.lines, solutions, definitions, workloads, out)
    return ReportOutcome(merged=merged, written=written)


def load_solutions(root: Path) -> dict[str, SolutionInfo]:
    """name -> what the report needs of each solution.json (author, definition, env, baseline)."""
    found: dict[str, SolutionInfo] = {}
    for path in sorted(root.glob("*/solution.json")):
        try:
            raw: Mapping[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # check-inputs reports broken solution files; the report goes on without
        found[str(raw["name"])] = SolutionInfo(
            name=str(raw["name"]),
            definition=str(raw.get("definition")),
            author=str(raw.get("author") or "unknown"),
            env=str(raw.get("env") or ""),
            baseline=bool(raw.get("baseline")),
        )
    return found
