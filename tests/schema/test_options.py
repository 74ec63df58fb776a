"""The evaluation options are declared once (envaudit.schema.options): every field is a flag of
the commands its metadata names, survives job.json and a Slurm task's command line unchanged,
and reaches the worker whole. A new field needs no edit anywhere else for these to hold."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest
import typer.main

from envaudit.cli import app
from envaudit.schema.options import EvalOptions, option_fields


def _non_default(option: Any) -> Any:
    """A value of the option's type other than its default."""
    return 75.0 if option.name == "measure_ms" else not option.default


def _parsed(command: str, args: list[str]) -> EvalOptions:
    """What the command's parser makes of `args`, read back as options."""
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    context = click_command.make_context(command, [*args], resilient_parsing=True)
    names = {f.name for f in option_fields(command)}
    return EvalOptions(**{k: v for k, v in context.params.items() if k in names})


@pytest.mark.parametrize("command", ["run", "audit"])
def test_every_declared_option_is_a_flag_of_its_commands(command: str) -> None:
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    flags = {opt for param in click_command.params for opt in param.opts}
    declared = option_fields(command)
    assert declared, f"{command} takes no evaluation option"
    for option in declared:
        assert option.metadata["flag"] in flags, (command, option.name)


def test_run_takes_every_option_and_audit_fixes_the_rest() -> None:
    assert [f.name for f in option_fields("run")] == [f.name for f in fields(EvalOptions)]
    assert {f.name for f in option_fields("audit")} < {f.name for f in fields(EvalOptions)}


@pytest.mark.parametrize("name", [f.name for f in fields(EvalOptions)])
def test_each_option_survives_the_record_and_the_command_line(name: str) -> None:
    option = next(f for f in fields(EvalOptions) if f.name == name)
    options = replace(EvalOptions(), **{name: _non_default(option)})
    assert EvalOptions.from_record(options.record()) == options
    assert _parsed("run", options.cli_args()) == options
    assert EvalOptions().cli_args() == []


def test_a_record_without_options_is_the_defaults() -> None:
    assert EvalOptions.from_record(None) == EvalOptions()
    assert EvalOptions.from_record({"scale_probe": True}) == EvalOptions(scale_probe=True)


def test_measure_ms_out_of_range_is_a_problem() -> None:
    assert EvalOptions(measure_ms=75.0).problem() is None
    problem = EvalOptions(measure_ms=5.0).problem()
    assert problem is not None and "outside 10-60000 ms" in problem[0]


def test_the_job_hands_the_options_whole_to_the_worker(tmp_path: Path) -> None:
    from envaudit.runtime.jobs import RunRequest, plan_job
    from tests.conftest import write_toy_root
    from tests.harness.test_faults import write_solution

    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    options = EvalOptions(strict_diagnostic=True, measure_ms=75.0)
    request = RunRequest(
        "correct",
        data_root=root,
        solutions_root=tmp_path / "solutions",
        device="cpu",
        evaluation=options,
        report=tmp_path / "results.jsonl",
    )
    job = plan_job(request, "host")
    assert job.worker_view(str, job.workloads)["options"] == options.record()
