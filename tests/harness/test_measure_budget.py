"""`--measure-ms`: the measured time each timing may spend, carried from the command to the
harness's stopping rule and recorded in every line; out-of-range values are usage errors;
an audit passes it to each Slurm task, and a reproduction runs a line again under its own."""

from __future__ import annotations

import json
import time
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.commands.reproduce import recorded_budget
from envaudit.harness.timing import CPU_TARGET_MEASURE_MS, time_wall_clock
from envaudit.runtime.scheduling.audit import AuditPlan, _task_args
from envaudit.schema.options import EvalOptions
from envaudit.schema.result_line import Timing
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

TOY = {"toy": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False)}


def run(tmp_path: Path, *flags: str) -> tuple[int, str, list[dict]]:
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "toy", TOY)
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "toy", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--report", str(report), *flags]
    result = CliRunner().invoke(app, argv)
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.is_file() else []
    return result.exit_code, result.output, lines


def test_every_line_records_the_budget_it_was_measured_under(tmp_path: Path) -> None:
    code, output, lines = run(tmp_path / "asked", "--measure-ms", "40")
    assert code == 0, output
    assert lines and {line["timing"]["eager"]["budget_ms"] for line in lines} == {40.0}
    code, output, lines = run(tmp_path / "default")
    assert code == 0, output
    assert {line["timing"]["eager"]["budget_ms"] for line in lines} == {CPU_TARGET_MEASURE_MS}


def test_the_cpu_timer_spends_what_it_is_given() -> None:
    """A 2 ms call: a 20 ms budget gives about 10 iterations, a 90 ms one about 45."""
    counts = {}
    for budget in (20.0, 90.0):
        stats = time_wall_clock(lambda i: time.sleep(0.002), 1, budget)
        assert stats.budget_ms == budget
        counts[budget] = stats.iterations
    assert counts[20.0] <= 12 and counts[90.0] >= 30, counts


def test_a_budget_out_of_range_is_a_usage_error(tmp_path: Path) -> None:
    code, output, lines = run(tmp_path, "--measure-ms", "5")
    assert code == 2 and "--measure-ms 5: outside 10-60000 ms" in output, output
    assert lines == []


def test_slurm_tasks_and_reproductions_keep_the_budget(tmp_path: Path) -> None:
    plan = AuditPlan(
        solutions=["toy"],
        devices=[(None, "cpu")],
        out=tmp_path,
        runtime="host",
        evaluation=EvalOptions(measure_ms=75.0),
    )
    args = _task_args(plan, "toy", ("uuid-1",), gpu=False)
    assert args[args.index("--measure-ms") + 1] == "75.0"
    assert recorded_budget(Timing.model_validate({"eager": {"budget_ms": 75.0}})) == 75.0
    before = Timing.model_validate({"eager": {"median_ms": 1.0}})  # a line from before budgets
    assert recorded_budget(before) is None and recorded_budget(None) is None
