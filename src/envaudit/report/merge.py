"""Merge result files from any number of runs, runtimes and machines into one set of lines.

Every input line is accounted for: merged, a repeat of a line already merged (same solution
revision, workload, environment and GPU, same status: the newest measurement is kept), a
conflict (same key, different status or solution revision: the newest is kept and both are
reported), or a finding with its file and line number (truncated, not JSON, unknown kind, older
schema, unknown status). Nothing readable is left out; an input that cannot be read at all (no
such file, a folder, not UTF-8) stops the merge before any line is merged.

A line's key is the one of `envaudit.schema.results` (solution, workload, env, closure hash,
device), the key `--resume` skips by. Which line of one key is kept, so that the same inputs
always give the same report: the rule of `envaudit.schema.results` (the newest by `timestamp` as
an instant, an undated line older than every dated one), a tie going to the line read last: the
later file on the command line, then the later line in a file.

Every line is read through `envaudit.schema.result_line.ResultLine` (both schema versions); a
line the model refuses is a finding naming the field. The merged file writes each line back as
it was read (`ResultLine.written`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.schema.models import EvaluationStatus
from envaudit.schema.names import name_problem, shown
from envaudit.schema.reading import JsonLine, UnreadableFile, json_lines, loads_json
from envaudit.schema.result_line import READABLE_VERSIONS, ResultLine, problems
from envaudit.schema.results import RESULT_SCHEMA_VERSION, LineKey, supersedes

KNOWN_STATUSES = {s.value for s in EvaluationStatus}
REQUIRED = ("definition", "solution", "status")
PATH_FIELDS = ("definition", "solution")
"""Fields of a line that name files or folders (a trace file, a solution's folder)."""


class UnreadableInputs(Exception):
    """Inputs that are not result files at all (missing, a folder, unreadable, not UTF-8): one
    message per file, each naming it."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class InputFinding:
    file: str
    line: int | None
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


@dataclass
class Conflict:
    key: LineKey
    kept: ResultLine
    dropped: ResultLine

    def render(self) -> str:
        solution, workload, env, _, device = self.key
        return (
            f"{solution} / {workload} on {device} ({env}): kept {self.kept.status} from"
            f" {self.kept.source}, dropped {self.dropped.status} from {self.dropped.source}"
        )


@dataclass
class InputFile:
    file: str
    lines: int = 0
    results: int = 0
    distributions: int = 0


@dataclass
class MergeResult:
    lines: list[ResultLine] = field(default_factory=list)
    findings: list[InputFinding] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    repeats: int = 0
    runs: list[ResultLine] = field(default_factory=list)
    """Every line read, repeats included (`lines` keeps the newest per key): what
    env_compare needs to put an interval on a difference between envs."""
    distributions: dict[str, dict[str, str]] = field(default_factory=dict)
    inputs: list[InputFile] = field(default_factory=list)
    newer: list[str] = field(default_factory=list)
    """FILE:LINE of each line of a schema version newer than this envaudit reads."""


# A converter for lines in another format (FlashInfer-Bench traces): returns our line or None.
Converter = Callable[[Mapping[str, Any]], dict[str, Any] | None]


NEWER_HINT = "--accept-newer-schema"


def merge_files(
    paths: Iterable[Path], convert: Converter | None = None, accept_newer: bool = False
) -> MergeResult:
    """Every input read first (UnreadableInputs naming each bad one), then merged in order.
    Lines of a schema version newer than this envaudit reads are refused (UnreadableInputs,
    naming the first few) unless `accept_newer`: a CI gate fed a newer file must not pass on
    fields it cannot read."""
    inputs = read_inputs(paths)
    result = MergeResult()
    kept: dict[LineKey, ResultLine] = {}
    for path, lines in inputs:
        summary = InputFile(file=str(path))
        result.inputs.append(summary)
        for line in _read(path, lines, summary, result, convert):
            _admit(line, kept, result)
    if result.newer and not accept_newer:
        more = f" and {len(result.newer) - 3} more" if len(result.newer) > 3 else ""
        raise UnreadableInputs(
            [
                f"{', '.join(result.newer[:3])}{more}: result lines of a schema version newer"
                f" than this envaudit reads ({READABLE_VERSIONS[0]} to {RESULT_SCHEMA_VERSION});"
                f" upgrade envaudit, or pass {NEWER_HINT} to merge them as read"
            ]
        )
    result.lines = sorted(kept.values(), key=lambda line: line.key)
    return result


def read_inputs(paths: Iterable[Path]) -> list[tuple[Path, list[JsonLine]]]:
    """(path, lines) of every input, each line bounded (schema.reading); UnreadableInputs
    naming all that are no regular text file (a device, a FIFO, a folder, binary bytes)."""
    read: list[tuple[Path, list[JsonLine]]] = []
    problems: list[str] = []
    for path in paths:
        try:
            read.append((path, list(json_lines(path))))
        except FileNotFoundError:
            problems.append(f"{path}: no such file")
        except IsADirectoryError:
            problems.append(f"{path}: a folder, not a result file")
        except OSError as exc:
            problems.append(f"{path}: cannot be read ({exc.strerror or exc})")
        except UnreadableFile as exc:
            problems.append(f"{exc}; is it a result file?")
    if problems:
        raise UnreadableInputs(problems)
    return read


def _read(
    path: Path,
    lines: list[JsonLine],
    summary: InputFile,
    result: MergeResult,
    convert: Converter | None,
) -> Iterable[ResultLine]:
    def finding(number: int | None, message: str) -> None:
        result.findings.append(InputFinding(str(path), number, message))

    if not any(line.text.strip() for line in lines):
        finding(None, "empty input: no result lines")
        return
    for raw in lines:
        if not raw.text.strip():
            continue
        summary.lines += 1
        try:
            parsed = loads_json(raw.text, f"{path}:{raw.number}")
        except UnreadableFile as exc:
            finding(raw.number, f"{str(exc).split(': ', 1)[-1]}; skipped")
            continue
        except json.JSONDecodeError as exc:
            message = (
                "truncated last line (an interrupted run?); skipped"
                if not raw.complete
                else f"not JSON ({exc.msg}); skipped"
            )
            finding(raw.number, message)
            continue
        line = _classify(parsed, path, raw.number, summary, result, convert, finding)
        if line is not None:
            summary.results += 1
            yield line.read_from(f"{path}:{raw.number}")


def _classify(
    parsed: Any,
    path: Path,
    number: int,
    summary: InputFile,
    result: MergeResult,
    convert: Converter | None,
    finding: Callable[[int | None, str], None],
) -> ResultLine | None:
    if not isinstance(parsed, dict):
        finding(number, "not a JSON object; skipped")
        return None
    if "fingerprint" in parsed and "distributions" in parsed:
        result.distributions[str(parsed["fingerprint"])] = dict(parsed["distributions"])
        summary.distributions += 1
        return None
    if "schema_version" not in parsed and "evaluation" in parsed and convert is not None:
        converted = convert(parsed)
        if converted is None:
            finding(number, "FlashInfer-Bench line without an evaluation (a workload); skipped")
            return None
        parsed = converted  # then checked like any line of ours
    version = parsed.get("schema_version")
    missing = [k for k in REQUIRED if k not in parsed] + (
        []
        if isinstance(parsed.get("workload"), dict) and "uuid" in parsed["workload"]
        else ["workload.uuid"]
    )
    newer = isinstance(version, int) and not isinstance(version, bool)
    if newer and version > RESULT_SCHEMA_VERSION:
        result.newer.append(f"{path}:{number}")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        state = "skipped: " + ", ".join(missing) + " missing" if missing else "merged as read"
        finding(
            number,
            f"result schema version {version!r} (this envaudit reads"
            f" {READABLE_VERSIONS[0]} to {RESULT_SCHEMA_VERSION}); {state}",
        )
    elif missing:
        finding(number, f"not a result line ({', '.join(missing)} missing); skipped")
    if missing or _bad_names(parsed, number, finding):
        return None
    try:
        line = ResultLine.model_validate(parsed)
    except ValidationError as exc:
        finding(number, f"not a result line ({problems(exc)}); skipped")
        return None
    if line.status not in KNOWN_STATUSES:
        finding(number, f"unknown status {line.status!r}; merged, counted as not passed")
    return line


def _bad_names(
    parsed: Mapping[str, Any], number: int, finding: Callable[[int | None, str], None]
) -> bool:
    """Whether a field that names a file of the report (its definition names a trace file, its
    solution a solution's folder) is no plain name; each is a finding, and the line is skipped
    so that no writer builds a path from it."""
    bad = False
    context = parsed.get("context")
    env = context.get("env") if isinstance(context, Mapping) else None
    named = [(name, parsed.get(name)) for name in PATH_FIELDS]
    if env is not None:  # an env is a lock folder's name, and the report prints it
        named.append(("context.env", env))
    for name, value in named:
        problem = name_problem(value) if isinstance(value, str) else "it is not a string"
        if problem is not None:
            shown_value = shown(value) if isinstance(value, str) else repr(value)[:60]
            finding(number, f"{name} {shown_value} is not a plain name ({problem}); skipped")
            bad = True
    return bad


def _admit(line: ResultLine, kept: dict[LineKey, ResultLine], result: MergeResult) -> None:
    result.runs.append(line)
    key = line.key
    old = kept.get(key)
    if old is None:
        kept[key] = line
        return
    newer, older = (line, old) if supersedes(line.instant, old.instant) else (old, line)
    kept[key] = newer
    if _same_run(old, line):
        result.repeats += 1
    else:
        result.conflicts.append(Conflict(key=key, kept=newer, dropped=older))


def render_results(lines: Iterable[ResultLine], runs: Iterable[ResultLine] = ()) -> str:
    """results.jsonl: the merged lines, without our bookkeeping keys, in a stable order (see
    `_written_order`)."""
    return "".join(_result_text(line) for line in _written_order(lines, runs))


def result_line_numbers(
    lines: Iterable[ResultLine], runs: Iterable[ResultLine] = ()
) -> dict[LineKey, int]:
    """Each kept line's number (1-based) in the results.jsonl `render_results` writes: what
    `envaudit reproduce results.jsonl:N` takes."""
    lines = list(lines)
    kept = {id(line) for line in lines}
    order = _written_order(lines, runs)
    return {line.key: n for n, line in enumerate(order, 1) if id(line) in kept}


def _written_order(lines: Iterable[ResultLine], runs: Iterable[ResultLine]) -> list[ResultLine]:
    """The kept lines in merge order, each preceded by its repeats among `runs` (same key,
    status and solution revision as the kept line: what env_compare puts intervals on), so
    that merging the file again keeps the same lines and the same repeats, and the report,
    its environment comparisons included, comes out the same. A conflict's dropped line is
    not written."""
    kept = {line.key: line for line in lines}
    repeats: dict[LineKey, list[ResultLine]] = {}
    for run in runs:
        key = run.key
        line = kept.get(key)
        if line is not None and run is not line and _same_run(run, line):
            repeats.setdefault(key, []).append(run)
    return [run for key in kept for run in [*repeats.get(key, []), kept[key]]]


def _same_run(a: ResultLine, b: ResultLine) -> bool:
    """Same status and solution revision: a repeat of one measurement, not a conflict."""
    return (a.status, a.solution_hash) == (b.status, b.solution_hash)


def _result_text(line: ResultLine) -> str:
    written = line.written()
    return (
        json.dumps({k: v for k, v in written.items() if not k.startswith("_")}, sort_keys=True)
        + "\n"
    )
