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
    "argv",
    [
        ["doctor"],
        ["base", "build", "x"],
        ["build", "--env", "x"],
    ],
)
def test_commands_not_built_yet_say_so_and_exit_2(argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "not built yet" in result.output
