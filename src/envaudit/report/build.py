"""`envaudit merge`: result files in, the whole report out.

Writes, under the output folder: results.jsonl (merged), summary.json, preferred-solutions.json,
performance.md, interfaces.json, plots/ and FlashInfer-Bench traces/. The same inputs give the
same bytes except the generation time.

A report is only ever replaced by a better-founded one: --out is checked first (a folder this
process can write, or one it can create), every input must be a readable UTF-8 file, a merge
with no usable result line writes nothing, and the whole report is rendered in memory before
the first file is written. Each file is then written to a temporary name and renamed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from envaudit.dataset.interfaces import load_interfaces
from envaudit.dataset.solutions import SolutionIndexError, index_solutions, solution_roots
from envaudit.dataset.traceset import DatasetRootError, load_traceset
from envaudit.errors import EnvauditError, write_failed
from envaudit.report.choice import preferred_solutions
from envaudit.report.html import render_html
from envaudit.report.markdown import render_markdown
from envaudit.report.merge import (
    MergeResult,
    UnreadableInputs,
    merge_files,
    render_results,
)
from envaudit.report.plots import render_plots
from envaudit.report.summary import LockNotes, SolutionInfo, build_summary
from envaudit.report.traces import render_traces, trace_to_line
from envaudit.schema.names import check_under, name_problem, shown
from envaudit.schema.paths import (
    FolderBusy,
    PathOutsideRoot,
    folder_writers,
    write_bytes_atomically,
    write_text_atomically,
)
from envaudit.schema.results import now_iso
from envaudit.schema.summary import ReproduceFrom

INPUTS_HINT = (
    "merge takes the result files (.jsonl) that `envaudit run --report` and `envaudit audit"
    " --out` write, or FlashInfer-Bench traces"
)


class ReportError(EnvauditError):
    """Why no report was written: exit 2 (unreadable or unusable input, nothing to report, a
    refused solution name, unwritable --out, unreadable data root), as `compare` on the same
    input; `findings` are the merge's warnings, to show before the error."""


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
    locks: LockNotes | None = None,
    accept_newer: bool = False,
) -> ReportOutcome:
    """The report of `inputs` written into `out`, holding `out` against every other writer
    (schema.paths.folder_writers) from the first read to the last rename."""
    if not inputs:
        raise ReportError("no result files given")
    check_out(out)
    made = not out.exists()
    try:
        with folder_writers(out, exclusive=True):
            return _build_report(
                inputs, out, data_root, solutions_root, command, locks, accept_newer
            )
    except ReportError:
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()  # made only to be held: nothing was written
        raise
    except FolderBusy:
        raise ReportError(
            f"--out {out}: an audit or run is appending result lines there now; a merge would"
            " replace results.jsonl under it and lose them",
            hint="merge when it has ended, or merge into another folder",
        ) from None
    except OSError as exc:  # the folder cannot be made or opened
        raise write_failed(out, exc, "hold it for the report") from None


def _build_report(
    inputs: Sequence[Path],
    out: Path,
    data_root: Path,
    solutions_root: Path,
    command: str,
    locks: LockNotes | None,
    accept_newer: bool,
) -> ReportOutcome:
    try:
        merged = merge_files(inputs, convert=trace_to_line, accept_newer=accept_newer)
    except UnreadableInputs as exc:
        raise ReportError(
            "; ".join(exc.problems), hint=f"{INPUTS_HINT}; nothing was written to {out}"
        ) from exc
    if not merged.lines:
        raise ReportError(
            f"no usable result line in {', '.join(str(p) for p in inputs)}; nothing written"
            + (f", the report in {out} is left as it was" if _has_files(out) else ""),
            hint=INPUTS_HINT,
            findings=[f.render() for f in merged.findings],
        )
    files = render_report(merged, out, data_root, solutions_root, command, locks)
    _confine(files, out)
    for path, content in files.items():
        try:
            if isinstance(content, bytes):
                write_bytes_atomically(path, content)
            else:
                write_text_atomically(path, content)
        except OSError as exc:
            then = f"merge again (the files written before {path.name} are new)"
            raise write_failed(path, exc, "write it", then) from None
    return ReportOutcome(merged=merged, written=list(files))


def render_report(
    merged: MergeResult,
    out: Path,
    data_root: Path,
    solutions_root: Path,
    command: str,
    locks: LockNotes | None = None,
) -> dict[Path, str | bytes]:
    """Every file of the report by its path under `out`, in the order they are written."""
    solutions = load_solutions(solutions_root, data_root)
    try:
        traceset = load_traceset(data_root)
    except DatasetRootError as exc:
        raise ReportError(str(exc)) from exc
    definitions = {
        name: d.definition.model_dump(mode="json") for name, d in traceset.definitions.items()
    }
    workloads = {w.uuid: w.trace.workload.model_dump(mode="json") for w in traceset.workloads}
    interfaces = [i for _, i in sorted(load_interfaces(data_root).items())]
    generated_at = now_iso()
    reproduce_from = ReproduceFrom(
        results=_as_given(out / "results.jsonl"),
        data_root=_as_given(data_root),
        solutions_root=_as_given(solutions_root),
    )
    summary = build_summary(merged, solutions, definitions, locks, reproduce_from, generated_at)
    suites = {name: suite.workloads for name, suite in traceset.suites.items()}
    preferred = preferred_solutions(summary, suites, generated_at)
    try:
        traces = render_traces(merged.lines, solutions, definitions, workloads, out)
    except ValueError as exc:
        raise ReportError(str(exc), exit_code=1, hint="nothing was written") from exc
    results = render_results(merged.lines, merged.runs)
    files: dict[Path, str | bytes] = {out / "results.jsonl": results}
    files[out / "summary.json"] = _json(summary)
    files[out / "preferred-solutions.json"] = _json(preferred)
    files[out / "interfaces.json"] = (
        json.dumps(
            {"interfaces": [i.model_dump(mode="json") for i in interfaces]},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    files[out / "performance.md"] = render_markdown(summary, preferred, interfaces, command)
    plots = render_plots(summary, out)
    files.update(plots)
    files[out / "report.html"] = render_html(summary, preferred, plots, out, command, interfaces)
    files.update(traces)
    return files


def _json(model: BaseModel) -> str:
    """A summary file as committed: every field, keys sorted, one space of indent."""
    return json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"


def _confine(files: Mapping[Path, object], out: Path) -> None:
    """ReportError (exit 2) before anything is written when a file of the report would land
    outside --out: a folder in it that is a symbolic link elsewhere (traces/, plots/)."""
    for path in files:
        try:
            check_under(out, path)
        except PathOutsideRoot as exc:
            raise ReportError(
                f"--out {out}: {exc}",
                hint="remove the symbolic link from the report folder, or merge into another",
            ) from None


def check_out(out: Path) -> None:
    """ReportError unless `out` is a folder this process may write in, or can be made one."""
    hint = "name a folder for the report with --out (it is created when absent)"
    existing = out
    while not existing.exists() and not existing.is_symlink() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "" if existing == out else f" ({existing} is a file)"
        raise ReportError(f"--out {out} is not a folder{where}", hint=hint)
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == out else f" (cannot create it in {existing})"
        raise ReportError(f"--out {out} is not writable{where}", hint=hint)


def _has_files(folder: Path) -> bool:
    return folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))


def load_solutions(root: Path, data_root: Path | None = None) -> dict[str, SolutionInfo]:
    """name -> what the report needs of each solution (author, definition, env, baseline), from
    our layout (`<name>/solution.json`) and FlashInfer-Bench's (`<author>/<op_type>/
    <definition>/<name>.json`), found as run and audit find them (dataset/solutions.py). A
    name two files hold is an error naming both (exit 2): the report would otherwise describe
    one of them by chance. With `data_root`, its `solutions/` too (a FlashInfer-Bench root's)."""
    index = index_solutions(solution_roots(root, data_root))
    try:
        names = index.names()
    except SolutionIndexError as exc:
        raise ReportError(f"{exc}; nothing was written", hint=exc.hint) from None
    found: dict[str, SolutionInfo] = {}
    for name in names:
        entry = index.files[name][0]
        if entry.problem is not None or entry.definition is None:
            continue  # a file that is no solution: the report goes on without it
        raw = entry.header
        _require_names(entry.path, raw)
        found[name] = SolutionInfo(
            name=name,
            definition=entry.definition,
            author=str(raw.get("author") or "unknown"),
            env=str(raw.get("env") or ""),
            baseline=bool(raw.get("baseline")),
        )
    return found


def _require_names(path: Path, raw: Mapping[str, Any]) -> None:
    """ReportError (exit 2: unusable input) when a solution's name or author, which name folders of
    the report (traces/<author>/...), is no plain name: the report is not written at all rather
    than written somewhere else."""
    for field in ("name", "author"):
        value = raw.get(field)
        if value is None and field == "author":
            continue  # "unknown"
        problem = name_problem(value) if isinstance(value, str) else "it is not a string"
        if problem is not None:
            shown_value = shown(value) if isinstance(value, str) else repr(value)[:60]
            raise ReportError(
                f"{path}: {field} {shown_value} is not a plain name ({problem})",
                hint=f"fix the solution's {field} (it names a folder of the report) and merge"
                " again; nothing was written",
            )


def _as_given(path: Path) -> str:
    """A path as a command run from this folder takes it: relative where it lies under the
    working folder (so a committed report names no folder of this machine), else absolute."""
    if not path.is_absolute():
        return path.as_posix()
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return path.as_posix()
