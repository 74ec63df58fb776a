"""Result lines: one JSON object per (solution, workload), appended and flushed one at a time.

Standard library only (the harness writes them inside solution environments). Readers outside
the harness take a line through the typed model, `envaudit.schema.result_line.ResultLine`,
which also reads the earlier shapes (RESULT_SCHEMA_VERSION).

A run that is killed leaves at most one partial last line; appending starts a new line first,
and readers skip (and report) a partial line, so results already written are never lost.

A line's key, the one identity of a line for `--resume`, `envaudit merge`, the audit and the
supervisor (LineKey, made by `line_identity` only), is
    (solution, workload uuid, env, closure hash, device)
- env: `context.env`, the environment the line was measured in ("" when none is recorded);
- closure hash: `context.closure_hash`, the closure of that env's lock ("" when none: the host
  interpreter without a readable lock, a FlashInfer-Bench trace), so the same solution run
  again in another env, or in the same env at another closure, is another line;
- device: `context.device_id`, what the run was asked to use (a GPU's or MIG slice's UUID, or
  "cpu"), else the measured `environment.gpu_uuid` (lines that record no device id), else "cpu".
  The requested id comes first because it is what the supervisor knows before a workload runs.
`--resume` skips a workload whose key has any line in the report. When a file holds two lines
of one key (two runs into one report), the one that counts is the one `envaudit merge` keeps:
the newest by `timestamp` compared as instants (an offset-less stamp is UTC; a line without a
readable stamp is older than every dated one), and on a tie the later line in the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from envaudit.errors import write_failed
from envaudit.schema.paths import open_for_append
from envaudit.schema.reading import UnreadableFile, json_lines, loads_json

RESULT_SCHEMA_VERSION = 2
"""1: the closure hash twice, in `context.closure_hash` and in `context.env_check.lock_closure_hash`
(on lines with an environment check; always the same value). 2: once, in `context.closure_hash`.
`envaudit.schema.result_line` reads both."""
UNDATED = datetime.min.replace(tzinfo=UTC)

RESUME = "run the same command again with --resume (lines already written are kept)"

CPU = "cpu"
"""The device of a line run on the CPU (its `context.device_id`)."""

Line = TypeVar("Line")
Key = TypeVar("Key")


class LineKey(NamedTuple):
    """The identity of a result line (the module's docstring has the rule)."""

    solution: str
    workload: str
    env: str
    closure_hash: str
    device: str


def workloads_by_uuid(path: Path) -> dict[str, dict[str, Any]]:
    """The workloads of one `workloads/<op_type>/<definition>.jsonl` file, by UUID (raw JSON:
    the harness reads the dataset without the pydantic models). Each line is read with a bound;
    a line that is no workload (malformed, nested too deep, no uuid) is passed over here: the
    dataset's loader has named it already, and a job never selects it."""
    found: dict[str, dict[str, Any]] = {}
    for line in json_lines(path):
        try:
            parsed = loads_json(line.text, f"{path}:{line.number}")
        except ValueError:  # json.JSONDecodeError, UnreadableFile
            continue
        workload = parsed.get("workload") if isinstance(parsed, dict) else None
        if isinstance(workload, dict) and isinstance(workload.get("uuid"), str):
            found[workload["uuid"]] = workload
    return found


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def result_line(
    job: Mapping[str, Any],
    workload: Mapping[str, Any],
    outcome: Mapping[str, Any],
    environment: Mapping[str, Any] | None,
    solution_hash: str | None,
    wall_s: float,
) -> dict[str, Any]:
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "definition": job["definition"],
        "workload": {
            "uuid": workload["uuid"],
            "label": workload.get("label"),
            "axes": workload.get("axes", {}),
        },
        "solution": job["solution"],
        "solution_hash": solution_hash,
        **outcome,
        "context": job.get("context", {}),
        "environment": environment or {},
        "seed": workload.get("seed"),
        "timestamp": now_iso(),
        "wall_s": round(wall_s, 3),
    }


def append_line(path: Path, line: Mapping[str, Any]) -> None:
    """Append one line durably and all-or-nothing; start on a fresh line if a killed run left a
    partial one. An exclusive flock covers the check and the write: jobs on several GPUs append
    to one file. A write that does not land whole (a full disk writes part of a line and then
    fails) is cut back to the old length and raised as an exit-2 EnvauditError naming the file
    and the free space: a half-written line must never pass for this run's result."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(line, allow_nan=True) + "\n").encode()
    try:
        fd = open_for_append(path, os.O_RDWR)
    except OSError as exc:
        raise write_failed(path, exc, "open it to append a line", RESUME) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            _write_whole(fd, data, size)
        except OSError as exc:
            _cut_back(fd, size)
            what = f"append a line of {len(data)} bytes (the file is left as it was)"
            raise write_failed(path, exc, what, RESUME) from None
    finally:
        os.close(fd)


def _write_whole(fd: int, data: bytes, size: int) -> None:
    """Write, fsync and check that the file grew by exactly `data` (OSError otherwise): os.write
    may write only part of it, and only the length proves what reached the file."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.EIO, "the write made no progress")
        view = view[written:]
    os.fsync(fd)
    grown = os.fstat(fd).st_size - size
    if grown != len(data):
        raise OSError(errno.EIO, f"the file grew by {grown} bytes, not {len(data)}")


def _cut_back(fd: int, size: int) -> None:
    """Truncate to the length before the append, so readers never see part of the line."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)
        os.fsync(fd)


class NotResultLines(UnreadableFile):
    """A file given as result lines that is no such thing (binary, or no line is JSON)."""


def read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, parsed line or None when unreadable) for every non-empty line, each read
    with a bound (schema.reading); NotResultLines when the file is not UTF-8 text, is no
    regular file, or holds a line too long to be a result line."""
    if not path.exists():
        return
    try:
        for line in json_lines(path):
            if not line.text.strip():
                continue
            try:
                parsed = loads_json(line.text, f"{path}:{line.number}")
            except ValueError:  # json.JSONDecodeError, nested too deep
                yield line.number, None
                continue
            yield line.number, parsed if isinstance(parsed, dict) else None
    except UnreadableFile as exc:
        raise NotResultLines(f"{exc}; is it a result file?") from None


def check_result_file(path: Path) -> None:
    """NotResultLines unless `path` is absent, empty, or holds at least one JSON object line:
    appending result lines to any other file would spoil it."""
    lines = list(read_lines(path))
    if lines and all(line is None for _, line in lines):
        raise NotResultLines(
            f"{path}: not JSON lines (no line is a JSON object); is it a result file?"
        )


def line_identity(
    solution: object,
    workload: object,
    env: object,
    closure_hash: object,
    device_id: object,
    gpu_uuid: object = None,
) -> LineKey:
    """The key of a line from its parts (None where a line records none): the one place the
    rule of the module's docstring is written; `line_key`, the typed line's `key` and the
    supervisor's --resume all come here."""
    return LineKey(
        "" if solution is None else str(solution),
        "" if workload is None else str(workload),
        str(env or ""),
        str(closure_hash or ""),
        str(device_id or gpu_uuid or CPU),
    )


def line_key(line: Mapping[str, Any]) -> LineKey:
    """The key of a line as parsed JSON (any schema version: the closure hash is
    `context.closure_hash` in all of them)."""

    def field(name: str, within: Mapping[str, Any] = line) -> Mapping[str, Any]:
        found = within.get(name)
        return found if isinstance(found, Mapping) else {}

    context = field("context")
    return line_identity(
        line.get("solution"),
        field("workload").get("uuid"),
        context.get("env"),
        context.get("closure_hash"),
        context.get("device_id"),
        field("environment").get("gpu_uuid"),
    )


def instant(stamp: object) -> datetime:
    """A timestamp as an aware instant (offset-less: UTC); UNDATED when it does not parse."""
    if not isinstance(stamp, str):
        return UNDATED
    try:
        when = datetime.fromisoformat(stamp)
        return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        return UNDATED


def done_keys(path: Path) -> set[LineKey]:
    """The keys of lines already written (what --resume skips)."""
    return {line_key(line) for _, line in read_lines(path) if line is not None}


def supersedes(later: datetime, earlier: datetime) -> bool:
    """Whether a line read later, stamped `later`, counts over one read earlier stamped
    `earlier`: the newest instant wins, a tie going to the line read later. The one place the
    rule is written (newest_per_key, merge's conflicts, compare's sides)."""
    return later >= earlier


def newest_per_key(
    lines: Iterable[Line],
    key: Callable[[Line], Key],
    when: Callable[[Line], datetime],
) -> dict[Key, Line]:
    """The line that counts per key among `lines` in reading order (`supersedes`)."""
    kept: dict[Key, Line] = {}
    for line in lines:
        found = key(line)
        old = kept.get(found)
        if old is None or supersedes(when(line), when(old)):
            kept[found] = line
    return kept


def distributions_path(report: Path) -> Path:
    return report.with_name(report.stem + ".distributions.jsonl")


def logs_folder(report: Path) -> Path:
    """Where the worker logs of a report go (one folder per solution inside)."""
    return report.with_name(report.stem + ".logs")


def record_distributions(report: Path, fingerprint: str, dists: Mapping[str, str]) -> None:
    """Store the full distribution list once per fingerprint, beside the report."""
    path = distributions_path(report)
    known = {line.get("fingerprint") for _, line in read_lines(path) if line}
    if fingerprint not in known:
        append_line(path, {"fingerprint": fingerprint, "distributions": dict(dists)})
