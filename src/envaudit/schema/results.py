"""Result lines: one JSON object per (solution, workload), appended and flushed one at a time.

Standard library only (the harness writes them inside solution environments).

A run that is killed leaves at most one partial last line; appending starts a new line first,
and readers skip (and report) a partial line, so results already written are never lost.

A line's key is (solution, workload uuid, closure hash, device identity). `--resume` skips a
workload whose key has any line in the report. When a file holds two lines of one key (two runs
into one report), the one that counts is the one `envaudit merge` keeps: the newest by
`timestamp` compared as instants (an offset-less stamp is UTC; a line without a readable stamp is
older than every dated one), and on a tie the later line in the file.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envaudit.errors import write_failed

RESULT_SCHEMA_VERSION = 1
UNDATED = datetime.min.replace(tzinfo=UTC)

RESUME = "run the same command again with --resume (lines already written are kept)"

Key = tuple[str, str, str | None, str | None]
"""(solution, workload uuid, closure hash, device identity)."""


def workloads_by_uuid(path: Path) -> dict[str, dict[str, Any]]:
    """The workloads of one `workloads/<op_type>/<definition>.jsonl` file, by UUID (raw JSON:
    the harness reads the dataset without the pydantic models)."""
    found: dict[str, dict[str, Any]] = {}
    for raw in path.read_text().splitlines():
        if raw.strip():
            workload = json.loads(raw)["workload"]
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
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
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


class NotResultLines(ValueError):
    """A file given as result lines that is no such thing (binary, or no line is JSON)."""


def read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    """(line number, parsed line or None when unreadable) for every non-empty line;
    NotResultLines when the file is not UTF-8 text."""
    if not path.exists():
        return
    with path.open("rb") as handle:
        for number, data in enumerate(handle, start=1):
            try:
                raw = data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NotResultLines(
                    f"{path}: not UTF-8 JSON lines (line {number}, byte {exc.start} is"
                    f" 0x{data[exc.start]:02x}); is it a result file?"
                ) from None
            if not raw.strip():
                continue
            try:
                parsed = json.loads(raw)
            except json.JSONDecodeError:
                yield number, None
                continue
            yield number, parsed if isinstance(parsed, dict) else None


def check_result_file(path: Path) -> None:
    """NotResultLines unless `path` is absent, empty, or holds at least one JSON object line:
    appending result lines to any other file would spoil it."""
    lines = list(read_lines(path))
    if lines and all(line is None for _, line in lines):
        raise NotResultLines(
            f"{path}: not JSON lines (no line is a JSON object); is it a result file?"
        )


def line_key(line: Mapping[str, Any]) -> Key:
    def field(name: str) -> Mapping[str, Any]:
        found = line.get(name)
        return found if isinstance(found, Mapping) else {}

    context = field("context")
    closure, device = context.get("closure_hash"), context.get("device_id")
    return (
        str(line.get("solution", "")),
        str(field("workload").get("uuid", "")),
        None if closure is None else str(closure),
        None if device is None else str(device),
    )


def line_instant(line: Mapping[str, Any]) -> datetime:
    """The line's timestamp as an aware instant; UNDATED when it has none that parses."""
    stamp = line.get("timestamp")
    if not isinstance(stamp, str):
        return UNDATED
    try:
        when = datetime.fromisoformat(stamp)
        return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).astimezone(UTC)
    except (ValueError, OverflowError):
        return UNDATED


def done_keys(path: Path) -> set[Key]:
    """The keys of lines already written (what --resume skips)."""
    return {line_key(line) for _, line in read_lines(path) if line is not None}


def kept_lines(path: Path) -> dict[Key, dict[str, Any]]:
    """One line per key, the one that counts (see the module's docstring), in file order."""
    kept: dict[Key, dict[str, Any]] = {}
    for _, line in read_lines(path):
        if line is None:
            continue
        key = line_key(line)
        old = kept.get(key)
        if old is None or line_instant(line) >= line_instant(old):
            kept[key] = line
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
