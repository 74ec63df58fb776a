"""The slurm executor on a real single-node Slurm (scripts/slurm/single-node.sh; CI starts one
and sets ENVAUDIT_REQUIRE_SLURM=1 so these run there, never skip): a CPU audit of the smoke suite
as a job array of several tasks, one of which dies the first time and is resubmitted; the merged
lines equal a local audit's (statuses and correctness figures)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.settings import REQUIRE_SLURM
from tests.conftest import skip_unless_ready, slurm_missing, write_toy_root
from tests.harness.test_faults import write_solution

pytestmark = skip_unless_ready(slurm_missing(), REQUIRE_SLURM)

# Kills its task's `envaudit run` the first time it is imported (as a node failing would), and
# computes the right answer from then on. This process's parent is its worker's judge, whose
# parent is that run, or the fork server the run started (then the run is the server's parent).
DIES_ONCE = """
import os, signal
from pathlib import Path

def parent_of(pid):
    return int(Path(f"/proc/{{pid}}/stat").read_text().rsplit(")", 1)[1].split()[1])

MARK = Path({mark!r})
if not MARK.exists():
    MARK.write_text("died once")
    run = parent_of(os.getpid())  # the worker's judge; then its fork server, if any
    while b"envaudit.harness" in Path(f"/proc/{{run}}/cmdline").read_bytes():
        run = parent_of(run)
    os.kill(run, signal.SIGKILL)

def run(x, lengths, scale):
    return scaled(x, lengths, scale)
"""


def audit(tmp_path: Path, out: str, *extra: str) -> tuple[int, str, list[dict]]:
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(tmp_path / "data")]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--out", str(tmp_path / out)]
    result = CliRunner().invoke(app, [*argv, *extra])
    report = tmp_path / out / "results.jsonl"
    lines = [json.loads(x) for x in report.read_text().splitlines()] if report.is_file() else []
    return result.exit_code, result.output, lines


def figures(lines: list[dict]) -> list[tuple]:
    return sorted(
        (x["solution"], x["workload"]["uuid"], x["status"], json.dumps(x.get("correctness")))
        for x in lines
    )


def test_an_audit_as_a_job_array_retries_a_dead_task_and_merges_like_a_local_run(
    tmp_path: Path,
) -> None:
    write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in ("correct", "returns_nan"):
        write_solution(solutions, name)
    mark = tmp_path / "died-once"
    write_solution(solutions, "dies_once", {"dies_once": (DIES_ONCE.format(mark=str(mark)), False)})
    code, output, lines = audit(tmp_path, "slurm", "--executor", "slurm", "--retries", "2")
    assert code == 1, output  # returns_nan fails; the audit itself ran
    assert mark.exists()
    [record] = (tmp_path / "slurm" / "slurm").glob("*/array.json")
    array = json.loads(record.read_text())
    attempts = {t["solution"]: t["attempts"] for t in array["tasks"]}
    assert attempts == {"correct": 1, "returns_nan": 1, "dies_once": 2}
    assert "slurm: resubmitting 1 task(s)" in output and not array["gave_up"]
    assert len(array["tasks"]) == 3 and len(array["jobs"]) == 2
    local_code, _, local = audit(tmp_path, "local")
    assert local_code == 1
    assert figures(lines) == figures(local)


def test_resume_submits_only_what_has_no_line(tmp_path: Path) -> None:
    write_toy_root(tmp_path / "data")
    for name in ("correct", "correct_dps"):
        write_solution(tmp_path / "solutions", name)
    code, output, first = audit(tmp_path, "a", "--executor", "slurm", "--solution", "correct")
    assert [x["solution"] for x in first] == ["correct"]
    assert code == 0, output
    code, output, lines = audit(tmp_path, "a", "--executor", "slurm", "--resume")
    assert code == 0, output
    assert "1 task(s): 0" in output  # correct_dps only
    assert sorted(x["solution"] for x in lines) == ["correct", "correct_dps"]


def test_resume_in_another_env_runs_again_and_keeps_both(tmp_path: Path) -> None:
    """--resume skips by the line's identity: a line of env A is no line of env B."""
    write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    code, output, first = audit(tmp_path, "a", "--executor", "slurm")
    assert code == 0 and [x["context"]["env"] for x in first] == ["torch-cpu"], output
    spec = tmp_path / "solutions" / "correct" / "solution.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "env": "tilelang-0.1.12"}))
    code, output, lines = audit(tmp_path, "a", "--executor", "slurm", "--resume")
    assert code == 0, output
    assert "1 task(s)" in output, output
    assert sorted(x["context"]["env"] for x in lines) == ["tilelang-0.1.12", "torch-cpu"]
    code, output, again = audit(tmp_path, "a", "--executor", "slurm", "--resume")
    assert code == 0 and len(again) == 2, output  # now both envs have their line
