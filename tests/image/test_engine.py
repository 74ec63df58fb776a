"""No engine, or one that does not answer: one message, exit 2, for every command that needs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REPO

NOWHERE = {"ENVAUDIT_ENGINE_HOST": "unix:///nonexistent/envaudit-test.sock"}


@pytest.mark.parametrize(
    "argv",
    [
        ["build", "--env", "torch-cpu"],
        ["base", "build", "bookworm-minbase"],
        [
            "run",
            "--solution",
            "gemm_bf16_n4096_k12288-torch",
            "--runtime",
            "docker",
            "--env",
            "torch-cpu",
            "--device",
            "cpu",
        ],
    ],
)
def test_commands_needing_an_engine_say_none_answers(argv: list[str], tmp_path: Path) -> None:
    env = {**NOWHERE, "ENVAUDIT_CACHE": str(tmp_path / "cache")}
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exit_code == 2, result.output
    assert "no docker engine answers at unix:///nonexistent/envaudit-test.sock" in result.output
    assert "Traceback" not in result.output


def test_doctor_reports_a_missing_engine_and_picks_another_runtime() -> None:
    result = CliRunner().invoke(app, ["doctor", "--locks-dir", str(REPO / "locks")], env=NOWHERE)
    assert result.exit_code == 0, result.output
    assert "no docker engine answers" in result.output
    assert "audit runtime" in result.output and "docker:" in result.output
