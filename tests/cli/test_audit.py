"""`envaudit audit` on the host runtime over a toy root: UNSUPPORTED_DEVICE is not a failure,
a wrong result is, and --resume skips what is already in the results file."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution


def audit(root: Path, solutions: Path, out: Path, *names: str, resume: bool = False) -> tuple:
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(root)]
    argv += ["--out", str(out)]
    argv += ["--solutions-root", str(solutions)]
    for name in names:
        argv += ["--solution", name]
    if resume:
        argv.append("--resume")
    result = CliRunner().invoke(app, argv)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    return result.exit_code, result.output, lines


def test_audit_counts_and_exit_codes(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in ("correct", "gpu_only", "returns_nan"):
        write_solution(solutions, name)
    code, out, lines = audit(root, solutions, tmp_path / "a", "correct", "gpu_only")
    assert code == 0, out
    assert "1 PASSED, 1 UNSUPPORTED_DEVICE" in out  # smoke suite: one toy workload
    code, out, lines = audit(root, solutions, tmp_path / "a", "returns_nan")
    assert code == 1
    assert {line["status"] for line in lines} == {
        "PASSED",
        "UNSUPPORTED_DEVICE",
        "INCORRECT_NUMERICAL",
    }
    code, out, again = audit(root, solutions, tmp_path / "a", "correct", resume=True)
    assert len(again) == len(lines), "--resume ran a workload that already had a line"
