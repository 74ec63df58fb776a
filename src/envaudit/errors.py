"""The one error type every layer raises for a foreseeable failure, and the exit codes.

An `EnvauditError` carries what failed (naming the file, field, solution or workload), a hint
with the command or field to change, and the exit code of the command contract. The CLI renders
it in one place (`error: ...` / `hint: ...`); no foreseeable error reaches a user as a traceback.

Standard library only: it is a declared harness file (schema/results.py raises it).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

EXIT_OK = 0
EXIT_FAILED = 1
"""The audited thing failed: a wrong result, drift, a stale lock, bad input data."""
EXIT_USAGE = 2
"""Usage or environment error: bad arguments, no engine, no GPU, an unreadable file."""


def shown(value: str, limit: int = 60) -> str:
    """`value` quoted for a message, cut to `limit` characters."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")


def hint_line(hint: str) -> str:
    return f"hint: {hint}"


def with_hint(text: str, hint: str | None) -> str:
    """`text (hint: ...)`: a message and its hint on one line, where one line is all there is
    room for (a finding, an audit's list of job errors)."""
    return text + (f" (hint: {hint})" if hint else "")


class EnvauditError(Exception):
    def __init__(
        self,
        message: str,
        exit_code: int = EXIT_USAGE,
        hint: str | None = None,
        findings: list[str] | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.hint = hint
        self.findings = list(findings or [])
        """Warnings met on the way to the error, shown before it (a merge's findings)."""

    @property
    def message(self) -> str:
        return str(self)

    def rendered(self, subject: str | None = None) -> list[str]:
        """The error as the user reads it: its warnings, `error: ...` naming what failed (after
        `subject`, the env or solution it belongs to, when given) and `hint: ...`."""
        where = f"{subject}: " if subject else ""
        lines = [f"warning: {finding}" for finding in self.findings]
        lines.append(f"error: {where}{self}")
        if self.hint:
            lines.append(hint_line(self.hint))
        return lines

    def one_line(self) -> str:
        return with_hint(str(self), self.hint)


class WriteFailed(EnvauditError):
    """A file envaudit writes (a report, a result line) could not be written whole: the
    environment's fault, and one that ends an audit (every job after it would fail the same
    way, and the report's old lines must not be counted as this run's)."""


def free_bytes(path: Path) -> str:
    """What is free on the file system that holds `path` (or its nearest existing folder), in
    words; a disk-full message names it so the user knows how much to free."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return f"{shutil.disk_usage(probe).free} bytes free on its file system"
    except OSError:
        return "free space unknown"


def write_failed(
    path: Path, exc: OSError, what: str = "write", then: str = "run the command again"
) -> WriteFailed:
    """The environment error for a file that could not be written (full disk, quota, I/O, a
    read-only or foreign path): exit 2, naming the file and the cause, never the audited thing's
    fault. The hint fits the cause: free space is named only when space ran out."""
    cause = exc.strerror or str(exc)
    if getattr(exc, "found", None):  # schema.paths.NotOurs
        return WriteFailed(
            f"{path}: {cause}; nothing was written",
            EXIT_USAGE,
            hint="name a regular file or a path that does not exist yet",
        )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return WriteFailed(
            f"{path}: could not {what}: {cause}; {free_bytes(path)}",
            EXIT_USAGE,
            hint=f"free space on that file system (or write elsewhere), then {then}",
        )
    number = exc.errno or 0
    if number == errno.EEXIST and not path.parent.is_dir():  # mkdir of a folder that is a file
        number = errno.ENOTDIR
    return WriteFailed(
        f"{path}: could not {what}: {cause}",
        EXIT_USAGE,
        hint=f"{WRITE_HINTS.get(number, 'write elsewhere')}, then {then}",
    )


WRITE_HINTS = {
    errno.EROFS: "the file system is read-only: write elsewhere",
    errno.EACCES: "this user may not write there: write elsewhere or change its permissions",
    errno.EPERM: "this user may not write there: write elsewhere or change its permissions",
    errno.ENAMETOOLONG: "the name is too long for the file system: use a shorter one",
    errno.ENOTDIR: "a part of the path is a file, not a folder: write elsewhere",
    errno.EISDIR: "the path is a folder: name a file",
    errno.EEXIST: "something is already at that path: remove it or write elsewhere",
}
