"""Reading untrusted files: only regular files, bounded lines, bounded nesting, named errors.

Standard library only (the harness may use it inside solution environments).

Every file envaudit reads as data (result lines, traces, workloads, definitions, solutions,
locks, env.toml) comes from someone else. A device (`/dev/zero`, `/dev/full`) read whole never
ends and takes the machine's memory with it; a FIFO blocks the reader forever; a line without
an end does the same to a line reader; JSON nested 100,000 deep exhausts the interpreter's
stack. So every reader goes through here: a path must name a regular file (checked with stat,
which does not open, so a FIFO cannot block), a JSON-lines file is read one bounded line at a
time, and a decoding or nesting problem becomes an `UnreadableFile` naming the file (and line).
`UnreadableFile` is a ValueError, so a reader that already turns malformed JSON into a finding
or an error does the same with these.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_LINE_BYTES = 64 * 1024 * 1024
"""The longest JSON line read (64 MiB): result lines are a few KiB, workload lines with inline
tensors rarely more than a few MiB; a longer one is an error, not a reason to read on."""


class UnreadableFile(ValueError):
    """A file that cannot be read as the data it should hold; the message names it."""


@dataclass(frozen=True)
class JsonLine:
    number: int
    text: str
    """The line without its newline."""
    complete: bool
    """Whether it ended with a newline (a run killed mid-write leaves the last one without)."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words, for a message."""
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def non_regular(path: Path) -> str | None:
    """Why `path` exists but is not a regular file (after symlinks), or None (regular, or
    absent: the caller says what absence means)."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    if stat.S_ISREG(mode):
        return None
    return kind_of(mode)


def require_regular(path: Path, role: str = "") -> None:
    """UnreadableFile unless `path` is a regular file or absent. `role` (an option, such as
    `--report`) leads the message when given."""
    if not str(path):
        raise UnreadableFile(f"{role + ' ' if role else ''}'' is an empty path; name a file")
    problem = non_regular(path)
    if problem is not None:
        lead = f"{role} {path}" if role else str(path)
        raise UnreadableFile(f"{lead}: {problem}, not a regular file")


def read_bytes(path: Path) -> bytes:
    """The bytes of a regular file; UnreadableFile for anything else that exists."""
    require_regular(path)
    return path.read_bytes()


def read_bounded(path: Path, limit: int, what: str = "") -> bytes:
    """The bytes of a regular file of at most `limit` bytes; UnreadableFile (naming `what`, an
    option, and the file) for anything else, without reading more than `limit` + 1 bytes."""
    require_regular(path, what)
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        lead = f"{what} {path}" if what else str(path)
        raise UnreadableFile(f"{lead}: larger than {limit:,} bytes, the most read")
    return data


def read_text(path: Path) -> str:
    """A regular file's UTF-8 text (a BOM is dropped); UnreadableFile naming the file and byte
    when it is not text."""
    return decode(read_bytes(path), str(path))


def decode(data: bytes, origin: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            f"{origin}: not UTF-8 text (byte {exc.start} is 0x{data[exc.start]:02x})"
        ) from None


def loads_json(text: str | bytes, origin: str) -> Any:
    """json.loads, with nesting too deep for the interpreter's stack an UnreadableFile naming
    `origin` (json.JSONDecodeError passes through: callers word it their way)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{origin}: JSON nested too deeply to read") from None


def loads_toml(text: str, origin: str) -> dict[str, Any]:
    """tomllib.loads, with nesting too deep an UnreadableFile naming `origin`."""
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{origin}: TOML nested too deeply to read") from None


def load_json(path: Path) -> Any:
    """A regular UTF-8 file's JSON; UnreadableFile (or json.JSONDecodeError) naming it."""
    return loads_json(read_text(path), str(path))


def json_lines(path: Path, limit: int = MAX_LINE_BYTES) -> Iterator[JsonLine]:
    """Every line of a regular UTF-8 file, each read with a bound: UnreadableFile naming the
    file and line number for a line over `limit` bytes or one that is not UTF-8."""
    require_regular(path)
    with path.open("rb") as handle:
        number = 0
        while data := handle.readline(limit + 1):
            number += 1
            complete = data.endswith(b"\n")
            if len(data) > limit and not complete:
                raise UnreadableFile(
                    f"{path}:{number}: a line longer than {limit:,} bytes (the most read as one"
                    " JSON line)"
                )
            body = data[:-1] if complete else data
            if number == 1 and body.startswith(b"\xef\xbb\xbf"):
                body = body[3:]
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise UnreadableFile(
                    f"{path}: not UTF-8 JSON lines (line {number}, byte {exc.start} is"
                    f" 0x{body[exc.start]:02x})"
                ) from None
            yield JsonLine(number, text.rstrip("\r"), complete)
