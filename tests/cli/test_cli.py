from __future__ import annotations

import pytest
from typer.testing import CliRunner

from envaudit.cli import app

DESIGN_COMMANDS = [
    "doctor",
    "check-inputs",
    "lock",
    "fetch",
    "verify-env",
    "base",
    "build",
    "run",
    "audit",
    "merge",
    "upstreams",
]


def test_help_lists_every_command_of_the_design() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in DESIGN_COMMANDS:
        assert command in result.output


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["base", "build", "x"], "no base recipe 'x'"),
        (["build", "--env", "x"], "no environment 'x'"),
        (["build", "--solution", "nosuch"], "no solution or environment of that name"),
        (["build"], "exactly one of"),
        (["run", "--solution", "x", "--device", "cpu", "--runtime", "nosuch"], "no runtime"),
    ],
)
def test_image_commands_refuse_bad_names_with_exit_2(argv: list[str], words: str) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_doctor_json_lists_every_check_the_text_does() -> None:
    import json

    text = CliRunner().invoke(app, ["doctor"])
    answer = CliRunner().invoke(app, ["doctor", "--json"])
    assert answer.exit_code == text.exit_code, answer.output
    checks = json.loads(answer.stdout)["checks"]
    assert [c["name"] for c in checks if c["name"] in text.output] == [c["name"] for c in checks]
    assert {c["severity"] for c in checks} <= {"ok", "info", "warning", "error"}
