"""`envaudit merge`: result files (ours or FlashInfer-Bench traces) merged into one report
folder (report/build.py), each closure's stand-ins named from its lock (lock/history.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EnvauditError
from envaudit.lock.diff import diff_locks
from envaudit.lock.history import find_lock, stand_in_notes
from envaudit.report.build import build_report
from envaudit.report.summary import LockNotes


@dataclass(frozen=True)
class MergeRequest:
    files: list[Path]
    out: Path
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    accept_newer: bool = False
    """Read lines of a schema version newer than this envaudit knows, as read."""

    def command_line(self) -> str:
        """The command the report records as its maker: one that makes it again."""
        return "envaudit merge " + " ".join(str(f) for f in self.files) + f" --out {self.out}"


@dataclass(frozen=True)
class MergeSummary:
    """What the merge kept and found, each finding and conflict already in words."""

    inputs: int
    lines: int
    repeats: int
    warnings: list[str]
    """What reading the inputs found (a line skipped, a file with none, ...)."""
    conflicts: list[str]
    """Two lines of one key that disagree; the newest is kept."""
    written: list[Path]


def merge_results(request: MergeRequest) -> MergeSummary:
    """The report of `request.files` written under `request.out` (a ReportError, exit 2, when
    there is none to write: nothing readable, an unusable --out)."""
    outcome = build_report(
        request.files,
        request.out,
        request.data_root,
        request.solutions_root,
        request.command_line(),
        LockNotes(stand_in_notes, lock_differences),
        request.accept_newer,
    )
    merged = outcome.merged
    return MergeSummary(
        inputs=len(request.files),
        lines=len(merged.lines),
        repeats=merged.repeats,
        warnings=[finding.render() for finding in merged.findings],
        conflicts=[conflict.render() for conflict in merged.conflicts],
        written=list(outcome.written),
    )


def lock_differences(a: str, b: str) -> list[str] | None:
    """What the locks of closures `a` and `b` differ in, one item each ("source flashmla: ..."),
    read as `envaudit diff-env` reads them (from locks/, or git history for a closure the locks
    have moved on from); None where either cannot be found or read."""
    try:
        diff = diff_locks(find_lock(a), find_lock(b))
    except EnvauditError:
        return None
    return [f"{c.group} {c.item}: {c.a or '(absent)'} -> {c.b or '(absent)'}" for c in diff.changes]
