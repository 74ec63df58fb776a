"""The handoff of a GPU from one job's worker to the next (runtime/supervision/supervisor.py,
Handoff), and the next job's worker started ahead, beside the previous job (StagedWorker).

A worker left to exit is a real process here; the next job is a real CPU job of the toy
definition, run through the supervisor with the host runtime. Its worker must reach its gate
while the one before it still runs; it may check its solution while that one exits, and must
not time it before that one has gone."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from envaudit.runtime.base import RunOptions
from envaudit.runtime.jobs import RunRequest
from envaudit.runtime.registry import get_runtime
from envaudit.runtime.scheduling.steps import plan_run, prepare, run_job, stage, supervise
from envaudit.runtime.supervision.launchers import (
    FORK_SERVER_SWITCH,
    ProcessHandle,
    process_running,
)
from envaudit.runtime.supervision.supervisor import Handoff
from envaudit.schema.progress import HEARTBEAT_FILE, PROGRESS_FILE
from tests.conftest import REPO, write_toy_root
from tests.harness.test_faults import write_solution
from tests.runtime.test_forkserver import GPU, audit_two_solutions, gpu_device

# The one before: stays until the next job's worker has sent its environment (it is then at
# its gate, or preloading before it), or until a given file exists, lingers a little more,
# leaves a mark and exits; or never exits.
LEAVING = """
import sys, time
from pathlib import Path
jobs, mark, forever = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
linger = float(sys.argv[4])
awaited = Path(sys.argv[5]) if len(sys.argv) > 5 else None
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if awaited is not None and awaited.exists():
        break
    if awaited is None and any('"env"' in p.read_text() for p in jobs.glob("job-*/{progress}")):
        break
    time.sleep(0.01)
time.sleep(linger)
if forever:
    time.sleep(3600)
mark.write_text("gone")
""".replace("{progress}", PROGRESS_FILE)


def notes_the_mark(mark: Path, calls: Path, header: str = "") -> dict[str, tuple[str, bool]]:
    body = f"""
        import time
        from pathlib import Path
        def run(x, lengths, scale):
            word = "after" if Path({str(mark)!r}).exists() else "before"
            with open({str(calls)!r}, "a") as log:
                log.write(f"{{word}} {{time.time()}}\\n")
            return scaled(x, lengths, scale)
        """
    return {"after_handoff": (header + "\n" + textwrap.dedent(body), False)}


def calls_made(calls: Path) -> list[str]:
    """Each call of the solution in order: "before" or "after" the previous worker's mark."""
    return [line.split()[0] for line in calls.read_text().splitlines()] if calls.exists() else []


def call_times(calls: Path) -> list[float]:
    """The wall-clock time of each call of the solution, in order."""
    return [float(line.split()[1]) for line in calls.read_text().splitlines()]


def end_time(process: subprocess.Popen[bytes]) -> list[float]:
    """A list that gets the wall-clock time `process` ends, seen by a thread without reaping
    it (the handoff reaps it)."""
    seen: list[float] = []

    def watch() -> None:
        with contextlib.suppress(ChildProcessError):  # reaped first: a moment late
            os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
        seen.append(time.time())

    threading.Thread(target=watch, daemon=True).start()
    return seen


def after_handoff(tmp_path: Path, header: str = "") -> tuple[RunRequest, Path]:
    """The job that notes, whenever its solution is called, whether the previous worker has
    left its mark (in `calls` beside the mark; it runs `header` as its module is imported);
    (the request, the mark)."""
    mark = tmp_path / "gone"
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    write_solution(solutions, "after_handoff", notes_the_mark(mark, tmp_path / "calls", header))
    report = tmp_path / "results.jsonl"
    request = RunRequest(
        "after_handoff", data_root=root, solutions_root=solutions, device="cpu", report=report
    )
    return request, mark


def previous_worker(
    tmp_path: Path, mark: Path, forever: bool, linger_s: float = 0.3, awaited: Path | None = None
) -> subprocess.Popen[bytes]:
    jobs = tmp_path / "cache" / "jobs"
    argv = [sys.executable, "-c", LEAVING, str(jobs), str(mark), "1" if forever else "0"]
    argv += [str(linger_s), *([str(awaited)] if awaited is not None else [])]
    return subprocess.Popen(argv, start_new_session=True)


def read_report(request: RunRequest) -> list[dict]:
    assert request.report is not None
    return [json.loads(raw) for raw in request.report.read_text().splitlines()]


def run_while_leaving(
    request: RunRequest, leaving: subprocess.Popen[bytes], tmp_path: Path, overdue_s: float = 120
) -> tuple[list[dict], Handoff]:
    """Run the job while `leaving` is left in its GPU's handoff; (its lines, the handoff)."""
    handoff = Handoff()
    handoff.leave(ProcessHandle(leaving), tmp_path / "leaving.log", "before", overdue_s)
    run_job(request, get_runtime("host"), RunOptions(), handoff)
    return read_report(request), handoff


def run_after(tmp_path: Path, forever: bool, overdue_s: float) -> tuple[list[dict], Handoff, int]:
    """One job run while a process is left in its handoff, which goes (unless `forever`) 0.5 s
    after the job's first call of its solution; (its lines, the handoff, the left process's
    exit status)."""
    request, mark = after_handoff(tmp_path)
    leaving = previous_worker(tmp_path, mark, forever, 0.5, awaited=tmp_path / "calls")
    lines, handoff = run_while_leaving(request, leaving, tmp_path, overdue_s)
    return lines, handoff, leaving.wait(timeout=30)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(REPO)


def test_the_next_worker_checks_beside_the_last_and_times_once_it_has_gone(
    tmp_path: Path,
) -> None:
    lines, handoff, status = run_after(tmp_path, forever=False, overdue_s=120)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert status == 0
    calls = calls_made(tmp_path / "calls")
    # validated while the previous worker was still there (one call or two on the CPU), then
    # timed (many calls) only once it had gone
    early = calls.count("before")
    assert 1 <= early <= 2 and calls == ["before"] * early + ["after"] * (len(calls) - early)
    assert len(calls) - early > 10
    phases = lines[0]["phases_s"]
    assert phases["quiet_wait"] > 0.2
    assert phases.get("worker_gate_wait", 0.0) < phases["quiet_wait"]
    assert "quiet_wait" not in lines[1]["phases_s"]
    # the job's own worker may be left in the handoff in turn (if it had not exited by the
    # time its last line was read); waiting reaps it
    handoff.wait()
    assert handoff.leaving is None


def test_a_worker_that_does_not_go_is_killed_when_overdue(tmp_path: Path) -> None:
    request, mark = after_handoff(tmp_path)
    leaving = previous_worker(tmp_path, mark, True, awaited=tmp_path / "calls")
    ended = end_time(leaving)
    lines, handoff = run_while_leaving(request, leaving, tmp_path, overdue_s=2.0)
    assert leaving.wait(timeout=30) == -9
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    # the next job timed its solution only once the overdue one had been killed: what it
    # called before were the validation's calls (one or two on the CPU)
    times = call_times(tmp_path / "calls")
    early = sum(t < ended[0] for t in times)
    assert early <= 2 and len(times) - early > 10, (early, len(times))
    handoff.wait()


def test_a_staged_worker_starts_beside_the_previous_job_and_waits_for_it(tmp_path: Path) -> None:
    request, mark = after_handoff(tmp_path)
    # the previous job's worker is running (not yet handed off) when the next one is staged
    running = previous_worker(tmp_path, mark, forever=False)
    host = get_runtime("host")
    prepared = stage(prepare(host, plan_run(request, host), RunOptions()), RunOptions())
    staged = prepared.staged
    assert staged is not None
    heartbeat = staged.folder / HEARTBEAT_FILE
    touched = heartbeat.stat().st_mtime
    time.sleep(1.2)  # nobody follows the staged worker yet: its own thread keeps it alive
    assert heartbeat.stat().st_mtime > touched
    assert staged.handle.poll() is None
    handoff = Handoff()
    handoff.leave(ProcessHandle(running), tmp_path / "leaving.log", "before", 120)
    supervise(prepared, RunOptions(), handoff)
    lines = read_report(request)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert running.wait(timeout=30) == 0
    phases = lines[0]["phases_s"]
    # it ran from its launch until the previous worker had gone, gate wait included
    assert phases["worker_staged"] >= 1.2
    assert phases["worker_gate_wait"] > 0.2
    assert phases["worker_staged"] >= phases["worker_start"] + phases["worker_gate_wait"] - 0.05
    assert not staged.folder.exists()
    handoff.wait()


def test_a_staged_worker_that_will_not_run_is_killed_and_its_folder_removed(
    tmp_path: Path,
) -> None:
    request, _ = after_handoff(tmp_path)
    host = get_runtime("host")
    prepared = stage(prepare(host, plan_run(request, host), RunOptions()), RunOptions())
    staged = prepared.staged
    assert staged is not None
    deadline = time.monotonic() + 60
    progress = staged.folder / PROGRESS_FILE
    while not progress.is_file() or '"env"' not in progress.read_text(errors="replace"):
        assert time.monotonic() < deadline and staged.handle.poll() is None
        time.sleep(0.02)
    pid = staged.handle.pid  # type: ignore[attr-defined]  # forked, or a child
    prepared.discard()
    assert not process_running(pid)
    assert not staged.folder.exists()
    assert request.report is not None and not request.report.exists()


NAMES_THE_COMPILER = """
# torch.compile is named here, so the worker imports the compiler before its gate
import sys
if "torch._dynamo" not in sys.modules:
    raise ImportError("the worker did not import the compiler first")
"""


def test_a_worker_imports_what_its_solution_names_before_its_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FORK_SERVER_SWITCH, "0")  # a fresh interpreter, as in a container
    request, mark = after_handoff(tmp_path, NAMES_THE_COMPILER)
    phases = first_phases_beside(request, mark, tmp_path, linger_s=3.0)
    # torch._dynamo alone takes seconds to import (2.2 s on the project's CPU machine, 6.1 s on
    # the H200); done before the solution's load (which finds it imported), and beside the
    # previous worker
    assert phases["worker_preload"] > 1.0
    assert phases["solution_load"] < phases["worker_preload"]


def first_phases_beside(
    request: RunRequest, mark: Path, tmp_path: Path, linger_s: float
) -> dict[str, float]:
    """Run the job while a previous worker lingers `linger_s` after this one's environment
    record; the phases of its first line (both lines PASSED)."""
    leaving = previous_worker(tmp_path, mark, forever=False, linger_s=linger_s)
    lines, handoff = run_while_leaving(request, leaving, tmp_path)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert leaving.wait(timeout=30) == 0
    handoff.wait()
    return lines[0]["phases_s"]


def test_a_worker_imports_nothing_its_solution_does_not_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FORK_SERVER_SWITCH, "0")
    # spelt so that the sources do not name the compiler themselves
    header = 'import sys\nassert "torch." + "_dynamo" not in sys.modules'
    request, mark = after_handoff(tmp_path, header)
    lines = run_alone(request, mark)
    assert "worker_preload" not in lines[0]["phases_s"]


def run_alone(request: RunRequest, mark: Path) -> list[dict]:
    """Run the job with no process before it (its mark made first); its lines, both PASSED."""
    mark.write_text("gone")
    run_job(request, get_runtime("host"), RunOptions())
    lines = read_report(request)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    return lines


# A library that takes a second to import, and notes when it was imported and what the variable
# a solution may set first held then.
SLOW_LIBRARY = """
import os, time
from pathlib import Path
time.sleep(1.0)
Path(os.environ["SLOW_LIBRARY_NOTE"]).write_text(f"{time.time()} {os.environ.get('SLOW_MODE', '')}")
"""


def with_slow_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, top: str, helper: str | None = None
) -> tuple[RunRequest, Path, Path]:
    """The job of `after_handoff` whose main.py begins with `top` (and, with `helper`, has a
    second source helper.py holding it), the slow library on the path; (the request, the
    previous worker's mark, the library's note)."""
    libraries = tmp_path / "libraries"
    (libraries / "slow_library").mkdir(parents=True)
    (libraries / "slow_library" / "__init__.py").write_text(SLOW_LIBRARY)
    note = tmp_path / "imported"
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", f"{libraries}{os.pathsep}{path}" if path else str(libraries))
    monkeypatch.setenv("SLOW_LIBRARY_NOTE", str(note))
    request, mark = after_handoff(tmp_path)
    folder = tmp_path / "solutions" / "after_handoff"
    (folder / "main.py").write_text(top + (folder / "main.py").read_text())
    if helper is not None:
        (folder / "helper.py").write_text(helper)
        solution = json.loads((folder / "solution.json").read_text())
        solution["sources"].append({"path": "helper.py"})
        (folder / "solution.json").write_text(json.dumps(solution))
    return request, mark, note


@pytest.mark.parametrize(
    ("forked", "top", "helper"),
    [
        (True, "import slow_library\n", None),
        (False, "import slow_library\n", None),
        (False, "import helper\n", "import slow_library\nLOADED = True\n"),
    ],
    ids=["forked", "fresh", "through-its-own-module"],
)
def test_the_libraries_a_solution_imports_first_are_imported_before_its_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forked: bool, top: str, helper: str | None
) -> None:
    monkeypatch.setenv(FORK_SERVER_SWITCH, "1" if forked else "0")
    request, mark, _ = with_slow_library(tmp_path, monkeypatch, top, helper)
    phases = first_phases_beside(request, mark, tmp_path, linger_s=1.5)
    # imported before the worker's gate, not by the solution's load
    assert phases["worker_preload"] >= 1.0
    assert phases["solution_load"] < 0.5


def test_a_library_imported_after_the_solutions_own_code_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FORK_SERVER_SWITCH, "0")
    top = 'import os\nos.environ["SLOW_MODE"] = "set by the solution"\nimport slow_library\n'
    request, mark, note = with_slow_library(tmp_path, monkeypatch, top)
    lines = run_alone(request, mark)
    assert note.read_text().endswith(" set by the solution")  # imported after the line above
    assert "worker_preload" not in lines[0]["phases_s"]
    assert lines[0]["phases_s"]["solution_load"] >= 1.0


# The one before, on the GPU: holds all of its free memory but `keep` bytes, until a given file
# exists (and 0.5 s more).
HOLDING = """
import sys, time
from pathlib import Path
import torch
held, awaited, keep = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
held.write_text(str(hold.numel()))
deadline = time.monotonic() + 120
while not awaited.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)
"""

# Notes each attempt to take 4 GiB of scratch memory ("oom" or "ok") in CALLS.
NEEDS_4_GIB = """
        def note(word):
            with open(CALLS, "a") as log:
                log.write(word + "\\n")

        def run(x, lengths, scale):
            try:
                scratch = torch.empty(4 << 30, dtype=torch.uint8, device=x.device)
            except torch.cuda.OutOfMemoryError:
                note("oom")
                raise
            note("ok")
            del scratch
            return scaled(x, lengths, scale)
        """


@GPU
def test_memory_the_previous_worker_held_is_waited_for_not_failed(tmp_path: Path) -> None:
    """Out of memory while the previous worker still held the GPU's memory: the workload is
    evaluated again once that worker has gone, and passes."""
    calls = tmp_path / "calls"
    header = f"CALLS = {str(calls)!r}\n"
    sources = {"needs_4_gib": (header + textwrap.dedent(NEEDS_4_GIB), False)}
    write_solution(tmp_path / "solutions", "needs_4_gib", sources)
    held = tmp_path / "held"
    argv = [sys.executable, "-c", HOLDING, str(held), str(calls), str(2 << 30)]
    holder = subprocess.Popen(argv, start_new_session=True)
    deadline = time.monotonic() + 120
    while not held.exists():
        assert holder.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    request = RunRequest(
        "needs_4_gib",
        data_root=write_toy_root(tmp_path / "data"),
        solutions_root=tmp_path / "solutions",
        gpu=gpu_device()[1],
        report=tmp_path / "results.jsonl",
    )
    lines, handoff = run_while_leaving(request, holder, tmp_path)
    assert [line["status"] for line in lines] == ["PASSED", "PASSED"], lines[0].get("message")
    assert holder.wait(timeout=30) == 0
    assert lines[0]["phases_s"]["quiet_wait"] > 0.2
    made = calls_made(calls)
    assert made[0] == "oom" and set(made[1:]) == {"ok"}, made[:5]
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
    # the second job's worker was started while the first ran, and followed once it had gone
    order = [(m["event"], m["job"]) for m in marks]
    first = lines[0]["solution"]
    second = next(name for name in ("first", "second") if name != first)
    assert order.index(("worker_staged", second)) < order.index(("worker_handed_off", first))
    assert order.index(("worker_adopted", second)) > order.index(("worker_handed_off", first))
    staged = next(line for line in lines if line["solution"] == second)["phases_s"]
    assert staged["worker_staged"] > 0


def staged_audit(
    tmp_path: Path, depth: str, sources: dict[str, tuple[str, bool]]
) -> tuple[list[dict], list[dict]]:
    """Audit `sources` on the GPU with ENVAUDIT_STAGE_NEXT=depth; (its lines, its timeline)."""
    timeline = tmp_path / "timeline.jsonl"
    env = {
        "ENVAUDIT_TIMELINE": str(timeline),
        "ENVAUDIT_CACHE": str(tmp_path / "cache"),
        "ENVAUDIT_STAGE_NEXT": depth,
    }
    done, lines = audit_two_solutions(tmp_path, sources, env, gpu_device())
    assert done.returncode == 0, done.stdout + done.stderr
    return lines, [json.loads(raw) for raw in timeline.read_text().splitlines()]


@GPU
def test_staging_can_be_turned_off(tmp_path: Path) -> None:
    lines, marks = staged_audit(tmp_path, "0", SIMPLE)
    events = {m["event"] for m in marks}
    assert "worker_staged" not in events and "worker_handed_off" in events
    assert not any("worker_staged" in line.get("phases_s", {}) for line in lines)


@GPU
def test_two_jobs_can_be_staged_ahead(tmp_path: Path) -> None:
    lines, marks = staged_audit(tmp_path, "2", {**SIMPLE, "third": SIMPLE["first"]})
    assert sorted(line["status"] for line in lines) == ["PASSED"] * 6
    order = [(m["event"], m["job"]) for m in marks]
    ran = [job for event, job in order if event == "job_begin"]
    # the third job's worker was started while the first job ran, and followed after the second
    assert order.index(("worker_staged", ran[2])) < order.index(("worker_handed_off", ran[0]))
    assert order.index(("worker_adopted", ran[2])) > order.index(("worker_handed_off", ran[1]))
    firsts = {
        line["solution"]: line["phases_s"] for line in lines if "worker_start" in line["phases_s"]
    }
    assert ["worker_staged" in firsts[job] for job in ran] == [False, True, True]


def test_a_stage_depth_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    done, lines = audit_two_solutions(tmp_path, SIMPLE, {"ENVAUDIT_STAGE_NEXT": "two"})
    assert done.returncode == 2, done.stdout + done.stderr
    assert "ENVAUDIT_STAGE_NEXT='two' is not a number of jobs from 0 to 4" in done.stderr
    assert lines == []
