"""`envaudit run --candidate PATH --definition NAME`: an implementation that is not a solution
folder runs beside the definition's solutions, in the baseline's env, and nothing is written
into solutions/."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import CORRECT, write_solution


@pytest.fixture()
def scene(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(data root, solutions root with a baseline declaring torch-cpu, candidate file)."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    spec = json.loads((solutions / "correct" / "solution.json").read_text())
    (solutions / "correct" / "solution.json").write_text(json.dumps({**spec, "baseline": True}))
    candidate = tmp_path / "work" / "main.py"
    candidate.parent.mkdir()
    candidate.write_text(
        CORRECT + "\ndef run(x, lengths, scale):\n    return scaled(x, lengths, scale)\n"
    )
    return root, solutions, candidate


def invoke(root: Path, solutions: Path, *argv: str) -> tuple[int, str]:
    base = ["run", "--device", "cpu", "--runtime", "host", "--data-root", str(root)]
    result = CliRunner().invoke(app, [*base, "--solutions-root", str(solutions), *argv])
    return result.exit_code, result.output


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_candidate_runs_in_the_baseline_s_env_and_writes_no_solution(
    scene: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, solutions, candidate = scene
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    before = listing(solutions)
    report = tmp_path / "candidate.jsonl"
    code, out = invoke(
        root,
        solutions,
        "--candidate",
        str(candidate),
        "--definition",
        "toy_scale",
        "--report",
        str(report),
    )
    assert code == 0, out
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert lines and all(x["status"] == "PASSED" for x in lines)
    assert all(x["solution"].startswith("toy_scale-candidate-") for x in lines)
    assert {x["context"]["env"] for x in lines} == {"torch-cpu"}  # the baseline's env
    assert listing(solutions) == before


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--candidate", "{c}"], "needs --definition"),
        (["--candidate", "{c}", "--definition", "nope"], "not a definition"),
        (["--candidate", "{c}", "--solution", "correct"], "either --solution"),
        (["--solution", "correct", "--definition", "toy_scale"], "goes with --candidate"),
        (["--candidate", "{missing}", "--definition", "toy_scale"], "cannot be read"),
    ],
)
def test_candidate_misuse_is_a_usage_error(
    scene: tuple[Path, Path, Path], argv: list[str], words: str
) -> None:
    root, solutions, candidate = scene
    filled = [a.format(c=candidate, missing=candidate.parent / "absent.py") for a in argv]
    code, out = invoke(root, solutions, *filled)
    assert code == 2 and words in out, out


def test_an_audit_runs_the_candidate_beside_the_definition_s_solutions(
    scene: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, solutions, candidate = scene
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    before = listing(solutions)
    argv = ["audit", "--device", "cpu", "--runtime", "host", "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions), "--out", str(tmp_path / "audit")]
    argv += ["--candidate", str(candidate), "--definition", "toy_scale"]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    report = (tmp_path / "audit" / "results.jsonl").read_text().splitlines()
    ran = {json.loads(x)["solution"] for x in report}
    assert "correct" in ran and any(n.startswith("toy_scale-candidate-") for n in ran)
    assert listing(solutions) == before


def test_a_candidate_that_is_a_device_or_a_fifo_is_refused_unread(
    scene: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """`--candidate` naming /dev/zero (through a link) or a FIFO: exit 2 at once, nothing read
    (a device read whole never ends; a FIFO blocks its reader forever)."""
    root, solutions, _ = scene
    zero = tmp_path / "zero.py"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    for path in (zero, fifo):
        code, out = invoke(root, solutions, "--candidate", str(path), "--definition", "toy_scale")
        assert code == 2 and "not a regular file" in out, out
