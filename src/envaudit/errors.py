"""The one error type every layer raises for a foreseeable failure, and the exit codes.

An `EnvauditError` carries what failed (naming the file, field, solution or workload), a hint
with the command or field to change, and the exit code of the command contract. The CLI renders
it in one place (`error: ...` / `hint: ...`); no foreseeable error reaches a user as a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
"""The audited thing failed: a wrong result, drift, a stale lock, bad input data."""
EXIT_USAGE = 2
"""Usage or environment error: bad arguments, no engine, no GPU, an unreadable file."""


class EnvauditError(Exception):
    def __init__(self, message: str, exit_code: int = EXIT_USAGE, hint: str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.hint = hint

    @property
    def message(self) -> str:
        return str(self)
