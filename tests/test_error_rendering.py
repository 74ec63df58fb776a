"""Errors are rendered in one place (envaudit.errors): `error: ...` then `hint: ...`, or one line
`... (hint: ...)`. A hint written by hand elsewhere drifts from that form, so none is."""

from __future__ import annotations

import re

from envaudit.errors import EnvauditError, with_hint
from envaudit.report.build import ReportError
from tests.conftest import source_lines_matching

HAND_WRITTEN_HINT = re.compile(r"""["'(]\s*\(?hint:""")


def test_no_hint_is_written_by_hand_outside_the_renderer() -> None:
    found = source_lines_matching(HAND_WRITTEN_HINT, but="errors.py")
    assert not found, "render hints through envaudit.errors:\n" + "\n".join(found)


def test_the_renderer_gives_warnings_error_and_hint_in_order() -> None:
    exc = ReportError("nothing to report", 1, hint="name a result file", findings=["odd line"])
    assert isinstance(exc, EnvauditError)
    assert exc.rendered() == [
        "warning: odd line",
        "error: nothing to report",
        "hint: name a result file",
    ]
    assert exc.rendered("torch-cpu")[1] == "error: torch-cpu: nothing to report"
    assert exc.one_line() == "nothing to report (hint: name a result file)"
    assert EnvauditError("plain").rendered() == ["error: plain"]
    assert with_hint("text", None) == "text"
