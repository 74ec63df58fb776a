"""Options that do not apply are refused, and help says what a command really does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import tree_digest, write_toy_root
from tests.harness.test_faults import write_solution


@pytest.mark.parametrize("command", ["run", "audit"])
def test_over_with_the_host_runtime_is_refused(tmp_path: Path, command: str) -> None:
    """--over names an imported stack for a container image; the host runtime has no image,
    so silently ignoring it would record a run that is not what was asked for."""
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    argv = [command, "--runtime", "host", "--device", "cpu", "--over", "some-stack"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    if command == "run":
        argv += ["--solution", "correct", "--report", str(tmp_path / "out" / "r.jsonl")]
    else:
        argv += ["--out", str(tmp_path / "out")]
    before = tree_digest(tmp_path)
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "--over" in result.output and "host" in result.output, result.output
    assert "Traceback" not in result.output
    assert tree_digest(tmp_path) == before


def test_run_help_names_its_own_default_runtime() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200", "TERM": "dumb"})
    text = re.sub(r"[\s│]+", " ", result.output)
    assert "Default: host" in text, text
    assert "Default: docker" not in text, text
