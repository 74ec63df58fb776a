"""Merging the report's own results.jsonl gives the same report: the repeated runs that the
environment comparisons put intervals on are kept in it, not only the newest line per key."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REPO

DOCS = REPO / "docs" / "report"
VOLATILE = re.compile(r"^.*(\"generated_at\"|Generated \d{4}-|envaudit merge ).*$", re.MULTILINE)


def _masked(path: Path, out: Path | None = None) -> str:
    """Less the generation time and command; a report written to `out` names its results file
    there in its reproduce commands."""
    text = path.read_text()
    if out is not None:
        text = text.replace(f"{out}/results.jsonl", "docs/report/results.jsonl")
    return VOLATILE.sub("<volatile>", text)


def test_merging_the_reports_own_lines_keeps_the_environment_comparisons(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(REPO)
    out = tmp_path / "again"
    result = CliRunner().invoke(app, ["merge", "docs/report/results.jsonl", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "Environment comparisons" in (DOCS / "performance.md").read_text()
    assert _masked(out / "performance.md", out) == _masked(DOCS / "performance.md")
    again, committed = (json.loads((d / "summary.json").read_text()) for d in (out, DOCS))
    assert committed["env_comparisons"] and again["env_comparisons"] == committed["env_comparisons"]
    assert again["definitions"] == committed["definitions"]
    assert (out / "results.jsonl").read_text() == (DOCS / "results.jsonl").read_text()
