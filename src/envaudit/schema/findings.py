"""A problem found in an input, named precisely enough to fix. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from envaudit.errors import with_hint

Severity = Literal["error", "warning"]


@dataclass(frozen=True)
class Finding:
    """One problem: where it is (file, line, workload, field), what it is, and what to do.

    `error` findings make a check fail (exit 1); `warning` findings are reported only.
    """

    severity: Severity
    code: str
    path: str
    message: str
    workload: str | None = None
    field: str | None = None
    line: int | None = None
    hint: str | None = None

    def render(self) -> str:
        where = self.path + (f":{self.line}" if self.line is not None else "")
        parts = [where]
        if self.workload:
            parts.append(f"workload {self.workload}")
        if self.field:
            parts.append(self.field)
        text = f"{self.severity}[{self.code}] {': '.join(parts)}: {self.message}"
        return with_hint(text, self.hint)
