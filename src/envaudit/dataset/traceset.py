"""Load a FlashInfer-Bench TraceSet root into typed models, recording every load problem.

Loading never stops at the first bad file: a malformed definition or workload line becomes a
Finding and the rest of the root still loads, so `check-inputs` can report everything at once.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from envaudit.schema.findings import Finding
from envaudit.schema.models import Definition, Suite, Trace, unknown_keys
from envaudit.schema.reading import JsonLine, UnreadableFile, json_lines, load_json, loads_json


class DatasetRootError(OSError):
    """The root itself cannot be read (missing, not a directory, no definitions/)."""


@dataclass
class DefinitionFile:
    path: str
    definition: Definition


@dataclass
class WorkloadLine:
    path: str
    line: int
    trace: Trace

    @property
    def uuid(self) -> str:
        return self.trace.workload.uuid


@dataclass
class TraceSet:
    root: Path
    definitions: dict[str, DefinitionFile] = field(default_factory=dict)
    workloads: list[WorkloadLine] = field(default_factory=list)
    suites: dict[str, Suite] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def refusal_of(self, definition: str) -> str:
        """Why `definition` is not among the definitions: the error found in a definition file
        of that name (a reference that does not parse, a bad field), or that there is none, so
        a dataset's broken definition is named as such, never as an unknown name."""
        for finding in self.findings:
            if (
                finding.severity == "error"
                and finding.path.startswith("definitions/")
                and Path(finding.path).stem == definition
            ):
                return f"the dataset's definition file is refused: {finding.render()}"
        return f"not a definition under {self.root}"

    def workloads_of(self, definition: str) -> list[WorkloadLine]:
        return [w for w in self.workloads if w.trace.definition == definition]

    def workload_files(self, definition: str, uuids: Collection[str]) -> list[str]:
        """The files (relative to the root, in order) holding these workloads of `definition`.
        FlashInfer-Bench reads every *.jsonl under workloads/ and goes by each line's
        `definition`, so a root may keep them at workloads/<op_type>/<definition>.jsonl (as it
        writes them), at workloads/<definition>.jsonl (its example root) or anywhere else: the
        file is where the line was read, never a path built from the names."""
        wanted = set(uuids)
        found = (w.path for w in self.workloads_of(definition) if w.uuid in wanted)
        return list(dict.fromkeys(found))

    def suite_uuids(self, suite: str) -> set[str]:
        if suite == "all" and suite not in self.suites:
            return {w.uuid for w in self.workloads}
        found = self.suites.get(suite)
        if found is None:
            raise KeyError(suite)
        return {u for uuids in found.workloads.values() for u in uuids}


def load_traceset(root: Path) -> TraceSet:
    """Read definitions/, workloads/ and suites/ under `root`: every *.json under definitions/
    and every *.jsonl under workloads/ at any depth, as FlashInfer-Bench's TraceSet.from_path
    reads them (`<op_type>/<name>.json` or flat `<name>.json` alike)."""
    if not root.is_dir():
        raise DatasetRootError(f"{root}: not a directory")
    if not (root / "definitions").is_dir():
        raise DatasetRootError(f"{root}: no definitions/ folder; is this a TraceSet root?")
    ts = TraceSet(root=root)
    for path in sorted((root / "definitions").rglob("*.json")):
        _load_definition(ts, path)
    for path in sorted((root / "workloads").rglob("*.jsonl")):
        _load_workload_file(ts, path)
    for path in sorted((root / "suites").glob("*.json")):
        _load_suite(ts, path)
    return ts


def _rel(ts: TraceSet, path: Path) -> str:
    return path.relative_to(ts.root).as_posix()


def _parse(
    ts: TraceSet, model: type[BaseModel], data: Any, rel: str, line: int | None = None
) -> BaseModel | None:
    workload = None
    if isinstance(data, dict) and isinstance(data.get("workload"), dict):
        workload = data["workload"].get("uuid")
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = ".".join(str(p) for p in err["loc"])
            ts.findings.append(
                Finding("error", "invalid-field", rel, err["msg"], workload, loc or None, line)
            )
        return None
    for key in unknown_keys(parsed):
        ts.findings.append(
            Finding(
                "warning",
                "unknown-key",
                rel,
                "key not in the FlashInfer-Bench format or envaudit's additions; kept, not used",
                workload,
                key,
                line,
            )
        )
    return parsed


def _read_json(ts: TraceSet, path: Path) -> Any:
    try:
        return load_json(path)
    except json.JSONDecodeError as exc:
        msg = f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ts.findings.append(Finding("error", "malformed-json", _rel(ts, path), msg))
    except (OSError, UnreadableFile) as exc:  # a device, a FIFO, binary, nested too deeply
        ts.findings.append(Finding("error", "unreadable", _rel(ts, path), str(exc)))
    return None


def _load_definition(ts: TraceSet, path: Path) -> None:
    rel = _rel(ts, path)
    data = _read_json(ts, path)
    if data is None:
        return
    definition = _parse(ts, Definition, data, rel)
    if not isinstance(definition, Definition):
        return
    if definition.name in ts.definitions:
        other = ts.definitions[definition.name].path
        msg = f"definition {definition.name} is also defined in {other}"
        ts.findings.append(Finding("error", "duplicate-definition", rel, msg, field="name"))
        return
    if path.stem != definition.name:
        msg = f"file name {path.name} differs from name {definition.name}"
        ts.findings.append(Finding("warning", "file-name", rel, msg, field="name"))
    ts.definitions[definition.name] = DefinitionFile(rel, definition)


def _load_workload_file(ts: TraceSet, path: Path) -> None:
    rel = _rel(ts, path)
    try:
        lines = list(json_lines(path))
    except (OSError, UnreadableFile) as exc:  # a device, a FIFO, binary, a line without end
        ts.findings.append(Finding("error", "unreadable", rel, str(exc)))
        return
    for line in lines:
        if line.text.strip():
            _load_workload_line(ts, rel, line)


def _load_workload_line(ts: TraceSet, rel: str, line: JsonLine) -> None:
    try:
        data = loads_json(line.text, f"{rel}:{line.number}")
    except json.JSONDecodeError as exc:
        msg = f"malformed JSON: {exc.msg} at column {exc.colno}"
        ts.findings.append(Finding("error", "malformed-json", rel, msg, line=line.number))
        return
    except UnreadableFile as exc:
        ts.findings.append(Finding("error", "unreadable", rel, str(exc), line=line.number))
        return
    trace = _parse(ts, Trace, data, rel, line.number)
    if isinstance(trace, Trace):
        ts.workloads.append(WorkloadLine(rel, line.number, trace))


def _load_suite(ts: TraceSet, path: Path) -> None:
    data = _read_json(ts, path)
    if data is None:
        return
    suite = _parse(ts, Suite, data, _rel(ts, path))
    if isinstance(suite, Suite):
        ts.suites[suite.name] = suite
