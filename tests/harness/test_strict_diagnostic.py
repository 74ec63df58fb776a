"""`run --strict-diagnostic` end to end on the CPU: a solution within the formal tolerance but
outside the definition's diagnostic_tolerance passes, and its lines say by how much it misses
the strict bound; without the flag nothing is recorded."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

NOISY = {
    "noisy": (
        "def run(x, lengths, scale):\n    return scaled(x, lengths, scale) + 1e-3",
        False,
    )
}


def run(tmp_path: Path, *flags: str) -> list[dict]:
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    definition["tolerance"] = {"atol": 1e-2, "rtol": 1e-2, "rule": "and"}
    definition["diagnostic_tolerance"] = {"atol": 1e-5, "rtol": 0.0, "rule": "and"}
    path.write_text(json.dumps(definition))
    write_solution(tmp_path / "solutions", "noisy", NOISY)
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "noisy", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--report", str(report), *flags]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in report.read_text().splitlines()]


def test_a_formal_pass_records_the_missed_strict_bound(tmp_path: Path) -> None:
    lines = run(tmp_path, "--strict-diagnostic")
    assert lines and all(x["status"] == "PASSED" for x in lines)
    for line in lines:
        strict = line["strict_diagnostic"]
        assert strict["holds"] is False
        (output,) = strict["outputs"]
        assert 50 < output["factor"] < 150  # 1e-3 off against 1e-5 (float32 rounding aside)


def test_without_the_flag_nothing_is_recorded(tmp_path: Path) -> None:
    assert all("strict_diagnostic" not in x for x in run(tmp_path))


def test_the_report_shows_the_missed_strict_bound(tmp_path: Path) -> None:
    run(tmp_path, "--strict-diagnostic")
    argv = ["merge", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "out")]
    argv += ["--data-root", str(tmp_path / "data"), "--solutions-root", str(tmp_path / "solutions")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    assert f"the report: {tmp_path / 'out' / 'report.html'}" in result.output
    assert "strict bound missed (100x)" in (tmp_path / "out" / "performance.md").read_text()
