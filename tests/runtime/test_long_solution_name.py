"""A solution name of the longest length a name may have (schema/names.py: 255 bytes less what
the solution folder needs) still gets a report, logs and side files whose names fit a file
system's 255-byte limit: names built from it are bounded (a prefix and a hash of the whole)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.schema.results import read_lines
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

LONG = "s" * 250


def long_named_solution(solutions: Path) -> str:
    write_solution(solutions, "correct")
    (solutions / "correct").rename(solutions / LONG)
    spec = solutions / LONG / "solution.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "name": LONG}))
    return LONG


def test_the_default_report_of_a_long_named_solution_fits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write_toy_root(tmp_path / "data")
    name = long_named_solution(tmp_path / "solutions")
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--solution", name, "--runtime", "host", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code != 2, result.output
    (report,) = (tmp_path / "results").glob("*.cpu.jsonl")
    assert all(len(p.name.encode()) <= 255 for p in (tmp_path / "results").rglob("*"))
    lines = [line for _, line in read_lines(report) if line]
    assert lines and {line["solution"] for line in lines} == {name}


def test_a_long_named_solution_passes(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    name = long_named_solution(tmp_path / "solutions")
    argv = ["run", "--solution", name, "--runtime", "host", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--report", str(tmp_path / "r.jsonl")]
    result = CliRunner().invoke(app, argv)
    statuses = {line["status"] for _, line in read_lines(tmp_path / "r.jsonl") if line}
    assert statuses == {"PASSED"}, result.output
