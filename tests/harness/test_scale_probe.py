"""`run --scale-probe` end to end on the CPU: a solution whose error grows with the cube of its
input passes formally at the workload's own scale, misses the strict bound there, stays within
tolerance at x0.1 and fails at x10; the line records each factor, and the report shows them.
Only zero-mean normal random floats are scaled: the blob and the scalar keep their values."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

CUBIC = {
    "cubic": (
        "def run(x, lengths, scale):\n    return scaled(x, lengths, scale) + 1e-4 * x.float() ** 3",
        False,
    )
}


def run(tmp_path: Path, *flags: str, declared: list[str] | None = None) -> list[dict]:
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    if declared is not None:
        definition["scale_probe_inputs"] = declared
    definition["tolerance"] = {"atol": 1e-2, "rtol": 1e-2, "rule": "and"}
    definition["diagnostic_tolerance"] = {"atol": 1e-5, "rtol": 0.0, "rule": "and"}
    path.write_text(json.dumps(definition))
    write_solution(tmp_path / "solutions", "cubic", CUBIC)
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "cubic", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--report", str(report), *flags]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return [json.loads(x) for x in report.read_text().splitlines()]


def test_a_formal_pass_that_degrades_when_the_inputs_grow(tmp_path: Path) -> None:
    lines = run(tmp_path, "--strict-diagnostic", "--scale-probe")
    assert lines
    for line in lines:
        assert line["status"] == "PASSED"
        assert line["strict_diagnostic"]["holds"] is False
        probe = line["scale_probe"]
        assert probe["inputs"] == ["x"]  # not the integer lengths, not the scalar
        points = {p["factor"]: p for p in probe["points"]}
        assert list(points) == [1.0, 0.1, 10.0]
        assert points[1.0]["status"] == "PASSED" and points[0.1]["status"] == "PASSED"
        assert points[10.0]["status"] == "INCORRECT_NUMERICAL"
        errors = [points[f]["max_absolute_error"] for f in (0.1, 1.0, 10.0)]
        assert 0 < errors[0] < errors[1] < errors[2]
        assert 500 < errors[1] / errors[0] < 2000  # cubic growth (bf16/f32 rounding aside)
        assert line["correctness"]["max_absolute_error"] == points[1.0]["max_absolute_error"]


def test_without_the_flag_nothing_is_recorded(tmp_path: Path) -> None:
    assert all("scale_probe" not in x for x in run(tmp_path))


def test_the_report_shows_each_factor(tmp_path: Path) -> None:
    run(tmp_path, "--scale-probe")
    argv = ["merge", str(tmp_path / "r.jsonl"), "--out", str(tmp_path / "out")]
    argv += ["--data-root", str(tmp_path / "data"), "--solutions-root", str(tmp_path / "solutions")]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "out" / "performance.md").read_text()
    assert "scale x1 ok " in text and ", x0.1 ok " in text and ", x10 INCORRECT_NUMERICAL " in text


def test_a_definition_can_keep_its_inputs_out_of_the_probe(tmp_path: Path) -> None:
    """scale_probe_inputs = []: nothing is scaled (x1 only, and a note saying why)."""
    for line in run(tmp_path, "--scale-probe", declared=[]):
        probe = line["scale_probe"]
        assert probe["inputs"] == [] and [p["factor"] for p in probe["points"]] == [1.0]
        assert "no input to scale" in probe["note"]


def test_check_inputs_refuses_a_probe_input_the_definition_lacks(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    definition["scale_probe_inputs"] = ["x", "y"]
    path.write_text(json.dumps(definition))
    result = CliRunner().invoke(app, ["check-inputs", "--data-root", str(root)])
    assert result.exit_code == 1, result.output
    assert "y is not an input" in result.output and "scale_probe_inputs" in result.output
