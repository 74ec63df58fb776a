"""One folder, one kind of writer at a time: runs and audits append result lines side by side,
a merge replaces the folder's files, and neither starts while the other holds the folder (a
merge's rename would drop the lines appended meanwhile, and the audit would count the reduced
file as complete)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.schema.paths import folder_writers
from tests.conftest import REPO, write_toy_root
from tests.harness.test_faults import write_solution

LINES = REPO / "docs" / "results" / "h200" / "flashmla" / "flashmla-13.1.jsonl"


def test_a_merge_into_a_folder_an_audit_appends_to_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_bytes(LINES.read_bytes())
    before = (out / "results.jsonl").read_bytes()
    with folder_writers(out, exclusive=False):  # as an audit holds its --out
        result = CliRunner().invoke(app, ["merge", str(LINES), "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert "appending result lines there now" in result.output
        with folder_writers(out, exclusive=False):  # a second appender shares it
            pass
    assert (out / "results.jsonl").read_bytes() == before
    result = CliRunner().invoke(app, ["merge", str(LINES), "--out", str(out)])
    assert result.exit_code == 0, result.output


def test_a_run_into_a_folder_a_merge_rewrites_is_refused(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    out = tmp_path / "out"
    argv = ["run", "--solution", "correct", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions), "--report", str(out / "results.jsonl")]
    argv += ["--suite", "smoke"]
    out.mkdir()
    with folder_writers(out, exclusive=True):  # as a merge holds its --out
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, result.output
        assert "`envaudit merge` is rewriting this folder now" in result.output
    assert not (out / "results.jsonl").exists()
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
