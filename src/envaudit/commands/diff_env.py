"""`envaudit diff-env A B`: what differs between two locks, most likely to matter for a kernel
first (lock/diff.py); each side an env of the locks folder, a lock.json, or a closure hash
looked up in git history too (lock/history.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from envaudit.lock.diff import EnvDiff, diff_locks, render_diff
from envaudit.lock.history import find_lock


@dataclass(frozen=True)
class DiffRequest:
    a: str
    b: str
    locks_dir: Path = Path("locks")


@dataclass(frozen=True)
class DiffResult:
    diff: EnvDiff

    @property
    def identical(self) -> bool:
        return self.diff.identical

    def text(self) -> str:
        """The changes by group, most kernel-relevant first."""
        return render_diff(self.diff)

    def json_text(self) -> str:
        return json.dumps(self.diff.as_dict(), indent=1) + "\n"


def diff_envs(request: DiffRequest) -> DiffResult:
    """Both locks found (LockNotFound, exit 2, naming where it looked), then compared."""
    a = find_lock(request.a, request.locks_dir)
    b = find_lock(request.b, request.locks_dir)
    return DiffResult(diff_locks(a, b))
