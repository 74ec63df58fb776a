"""The handoff of a GPU from one job's worker to the next (runtime/supervisor.py, Handoff).

A worker left to exit is a real process here; the next job is a real CPU job of the toy
definition, run through the supervisor with the host runtime. Its worker must reach its gate
while the one before it still runs, and must not call the solution before that one has gone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from envaudit.runtime.jobs import RunRequest
from envaudit.runtime.launchers import ProcessHandle
from envaudit.runtime.registry import RunOptions, plan_run, run_planned
from envaudit.runtime.supervisor import Handoff
from envaudit.schema.progress import PROGRESS_FILE
from tests.conftest import REPO, write_toy_root
from tests.harness.test_faults import write_solution
from tests.runtime.test_forkserver import GPU, audit_two_solutions, gpu_device

# The one before: stays until the next job's worker has sent its environment (it is then at
# its gate), lingers a little more, leaves a mark and exits; or never exits.
LEAVING = """
import sys, time
from pathlib import Path
jobs, mark, forever = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if any('"env"' in p.read_text() for p in jobs.glob("job-*/{progress}")):
        break
    time.sleep(0.01)
time.sleep(0.3)
if forever:
    time.sleep(3600)
mark.write_text("gone")
""".replace("{progress}", PROGRESS_FILE)


def checks_the_mark(mark: Path) -> dict[str, tuple[str, bool]]:
    body = f"""
        from pathlib import Path
        def run(x, lengths, scale):
            mark = Path({str(mark)!r})
            if not mark.exists():
                raise RuntimeError("called while the previous worker was still there")
            return scaled(x, lengths, scale)
        """
    return {"after_handoff": (textwrap.dedent(body), False)}


def run_after(tmp_path: Path, forever: bool, overdue_s: float) -> tuple[list[dict], Handoff, int]:
    """One job run while a process is left in its handoff; (its lines, the handoff, the left
    process's exit status)."""
    cache = tmp_path / "cache"
    mark = tmp_path / "gone"
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "after_handoff", checks_the_mark(mark))
    report = tmp_path / "results.jsonl"
    request = RunRequest(
        "after_handoff", data_root=root, solutions_root=solutions, device="cpu", report=report
    )
    argv = [sys.executable, "-c", LEAVING, str(cache / "jobs"), str(mark), "1" if forever else "0"]
    leaving = subprocess.Popen(argv, start_new_session=True)
    handoff = Handoff()
    handoff.leave(ProcessHandle(leaving), tmp_path / "leaving.log", "before", overdue_s)
    run_planned(plan_run(request, "host", RunOptions()), RunOptions(), handoff)
    lines = [json.loads(raw) for raw in report.read_text().splitlines()]
    status = leaving.wait(timeout=30)
    return lines, handoff, status


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)


def test_the_next_worker_waits_at_its_gate_until_the_last_has_gone(tmp_path: Path) -> None:
    lines, handoff, status = run_after(tmp_path, forever=False, overdue_s=120)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert status == 0
    assert lines[0]["phases_s"]["worker_gate_wait"] > 0.2
    # the job's own worker may be left in the handoff in turn (if it had not exited by the
    # time its last line was read); waiting reaps it
    handoff.wait()
    assert handoff.leaving is None


def test_a_worker_that_does_not_go_is_killed_when_overdue(tmp_path: Path) -> None:
    lines, handoff, status = run_after(tmp_path, forever=True, overdue_s=2.0)
    assert status == -9
    # killed before it left its mark: the solution, called after the gate, says so
    assert [line["status"] for line in lines] == ["RUNTIME_ERROR", "RUNTIME_ERROR"]
    assert "previous worker was still there" in lines[0]["message"]
    handoff.wait()


SIMPLE = {
    "first": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False),
    "second": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False),
}


@GPU
def test_a_gpu_audit_hands_each_worker_over_to_the_next(tmp_path: Path) -> None:
    timeline = tmp_path / "timeline.jsonl"
    env = {"ENVAUDIT_TIMELINE": str(timeline), "ENVAUDIT_CACHE": str(tmp_path / "cache")}
    done, lines = audit_two_solutions(tmp_path, SIMPLE, env, gpu_device())
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(line["status"] for line in lines) == ["PASSED"] * 4
    marks = [json.loads(raw) for raw in timeline.read_text().splitlines()]
    handed = [m["job"] for m in marks if m["event"] == "worker_handed_off"]
    reaped = [m["job"] for m in marks if m["event"] == "worker_reaped"]
    assert sorted(handed) == sorted(reaped) == ["first", "second"]
    assert marks.index(next(m for m in marks if m["event"] == "audit_end")) > max(
        i for i, m in enumerate(marks) if m["event"] == "worker_reaped"
    )
