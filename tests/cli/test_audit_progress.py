"""An audit's progress as the terminal shows it (console.AuditProgress): plain lines with a
count and the time left where the output is a log, a bar with the same count on a terminal;
each job's outcome named either way."""

from __future__ import annotations

import io
from collections import Counter

from rich.console import Console

from envaudit.console import AuditProgress, audit_progress, duration_text, statuses_text


def test_plain_lines_count_the_jobs_and_estimate_the_time_left() -> None:
    out = io.StringIO()
    progress = AuditProgress(Console(file=out, width=200, highlight=False), terminal=False)
    progress.planned(3)
    progress.started("a-torch", "cpu")
    progress.ended("a-torch", "cpu", Counter({"PASSED": 2, "INCORRECT_NUMERICAL": 1}), 4.0)
    progress.started("b-flex", "cpu")
    progress.ended("b-flex", "cpu", Counter(), 61.0)
    progress.started("c-torch", "cpu")
    progress.ended("c-torch", "cpu", Counter({"PASSED": 1}), 1.0)
    lines = out.getvalue().splitlines()
    assert lines[0] == "audit [1/3]: a-torch on cpu"
    assert lines[1].startswith("audit [1/3 done]: a-torch on cpu: 2 PASSED, 1 INCORRECT_NUMERICAL")
    assert "left" in lines[1]
    assert lines[3].startswith("audit [2/3 done]: b-flex on cpu: no lines in 1 min 1 s")
    assert lines[5].startswith("audit [3/3 done]: c-torch on cpu: 1 PASSED in 1 s")
    assert "left" not in lines[5]  # nothing is left after the last job


def test_a_terminal_gets_a_bar_with_the_count_and_each_outcome() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, force_terminal=True, highlight=False)
    progress = AuditProgress(console, terminal=True)
    assert progress.bar is None  # no bar before the jobs are planned (env builds show theirs)
    progress.planned(2)
    progress.started("a-torch", "GPU-1234")
    progress.ended("a-torch", "GPU-1234", Counter({"PASSED": 4}), 2.0)
    progress.close()
    text = out.getvalue()
    assert "a-torch on GPU-1234: 4 PASSED in 2 s" in text
    assert "1/2" in text


def test_a_log_gets_plain_lines() -> None:
    with audit_progress() as progress:  # pytest's captured stderr is not a terminal
        progress.planned(1)
        assert progress.bar is None and not progress.terminal


def test_texts() -> None:
    assert statuses_text(Counter({"RUNTIME_ERROR": 1, "PASSED": 3})) == "3 PASSED, 1 RUNTIME_ERROR"
    assert duration_text(125.4) == "2 min 5 s"
