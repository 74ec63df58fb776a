"""A worker never outlives its supervisor.

`envaudit run` (host runtime) is started as a real process in its own session on a solution that
hangs, killed while the hanging workload is in flight (SIGKILL to its process group, or Ctrl-C:
SIGINT to the group), and then: the worker is gone within seconds, no line is written for the
hung workload even after the heartbeat would have gone stale, and a `run --resume` removes the
job folder the killed run left and writes exactly one line per workload.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from envaudit.schema.progress import HEARTBEAT_STALE_S, PROGRESS_FILE
from tests.conftest import REPO, UUID_BLOB, UUID_RANDOM, write_toy_root
from tests.harness.test_faults import write_solution

WORKER_GONE_S = 5.0
BEGIN_WITHIN_S = 120.0


@dataclass
class Scene:
    """One `envaudit run` of the hanging solution, with its own cache and report."""

    base: Path
    root: Path
    solutions: Path
    report: Path

    @property
    def cache(self) -> Path:
        return self.base / "cache"

    @property
    def jobs(self) -> Path:
        return self.cache / "jobs"

    def argv(self, timeout: float, resume: bool = False) -> list[str]:
        argv = [sys.executable, "-m", "envaudit", "run", "--solution", "hang"]
        argv += ["--runtime", "host", "--device", "cpu", "--data-root", str(self.root)]
        argv += ["--solutions-root", str(self.solutions), "--report", str(self.report)]
        argv += ["--reference-cache", str(self.base / "refcache"), "--timeout", str(timeout)]
        return argv + (["--resume"] if resume else [])

    def env(self) -> dict[str, str]:
        return {**os.environ, "ENVAUDIT_CACHE": str(self.cache)}

    def start(self, timeout: float = 600, resume: bool = False) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv(timeout, resume),
            cwd=REPO,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_ctrl_c_as_a_terminal_sends_it,
        )

    def lines(self) -> list[dict]:
        if not self.report.exists():
            return []
        return [json.loads(x) for x in self.report.read_text().splitlines() if x.strip()]

    def job_folders(self) -> list[Path]:
        return sorted(self.jobs.glob("job-*")) if self.jobs.is_dir() else []


def _ctrl_c_as_a_terminal_sends_it() -> None:
    """SIGINT at its default in the run, whatever this process inherited: a shell starts a
    background command with SIGINT ignored, and a Python started so never sees Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def make_scene(base: Path) -> Scene:
    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    write_solution(solutions, "hang")
    return Scene(base, root, solutions, base / "results.jsonl")


def workers_of(scene: Scene) -> list[int]:
    """Pids of harness workers on this scene's job folders: started as an interpreter (the job
    folder is in their command line) or forked by a fork server (they hold the job's progress
    file open for writing; the supervisor only reads it)."""
    found = []
    jobs = str(scene.jobs)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue  # a zombie has ended; only its parent has not collected it yet
        started = b"envaudit.harness.worker" in argv and any(
            a.startswith(jobs.encode()) for a in argv
        )
        if started or _holds_a_file_under(entry, jobs):
            found.append(int(entry.name))
    return found


def _holds_a_file_under(process: Path, folder: str) -> bool:
    """Whether the process has a job's progress file under `folder` open for writing."""
    try:
        fds = list((process / "fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError, ValueError):
            target = os.readlink(fd)
            if not target.startswith(folder) or not target.endswith(PROGRESS_FILE):
                continue
            info = (process / "fdinfo" / fd.name).read_text()
            flags = int(info.split("flags:")[1].split()[0], 8)
            if flags & os.O_ACCMODE != os.O_RDONLY:
                return True
    return False


def wait_for_begin(scene: Scene, process: subprocess.Popen[bytes]) -> None:
    """Until the worker announced the hanging workload (the 3-row blob one)."""
    deadline = time.monotonic() + BEGIN_WITHIN_S
    while time.monotonic() < deadline:
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        for folder in scene.job_folders():
            progress = folder / PROGRESS_FILE
            text = progress.read_text() if progress.exists() else ""
            if f'"event": "begin", "uuid": "{UUID_BLOB}"' in text:
                return
        time.sleep(0.1)
    pytest.fail(f"the hanging workload did not begin within {BEGIN_WITHIN_S:.0f} s")


def test_a_killed_run_leaves_no_worker_no_line_and_resume_cleans_up(tmp_path: Path) -> None:
    # Both ways of stopping a run, side by side, so the heartbeat wait is paid once.
    scenes = {
        signal.SIGKILL: make_scene(tmp_path / "sigkill"),
        signal.SIGINT: make_scene(tmp_path / "sigint"),
    }
    processes = {sig: scene.start() for sig, scene in scenes.items()}
    started = list(processes.values())
    try:
        for sig, scene in scenes.items():
            wait_for_begin(scene, processes[sig])
            assert workers_of(scene), f"{sig.name}: no worker found while the workload runs"
        for sig, process in processes.items():
            os.killpg(process.pid, sig)
        for process in processes.values():
            process.wait(timeout=30)
        deadline = time.monotonic() + WORKER_GONE_S
        while time.monotonic() < deadline and any(workers_of(s) for s in scenes.values()):
            time.sleep(0.1)
        for sig, scene in scenes.items():
            assert not workers_of(scene), f"{sig.name}: the worker outlived its supervisor"
        # Past the point where an orphan's heartbeat would have gone stale: still no line.
        time.sleep(HEARTBEAT_STALE_S + 2)
        for sig, scene in scenes.items():
            assert scene.lines() == [], f"{sig.name}: a line was written after the kill"
        assert scenes[signal.SIGINT].job_folders() == [], "Ctrl-C left its job folder"
        resumed = {sig: scene.start(timeout=3, resume=True) for sig, scene in scenes.items()}
        started += resumed.values()
        for sig, scene in scenes.items():
            _, err = resumed[sig].communicate(timeout=300)
            assert resumed[sig].returncode == 1, err  # the hang is a TIMEOUT now
            assert scene.job_folders() == [], f"{sig.name}: job folders left after --resume"
            lines = scene.lines()
            assert sorted(line["workload"]["uuid"] for line in lines) == [UUID_BLOB, UUID_RANDOM]
            statuses = {line["workload"]["uuid"]: line["status"] for line in lines}
            assert statuses == {UUID_BLOB: "TIMEOUT", UUID_RANDOM: "PASSED"}, statuses
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_job_folders_made_at_once_are_never_taken_for_stale(tmp_path: Path) -> None:
    """Threads (an audit's GPU slots and the jobs staged beside them) and processes make job
    folders under one root, each clearing the stale ones first: a folder just made must never
    look stale to another (it once could, between its making and its lock)."""
    from concurrent.futures import ThreadPoolExecutor

    from envaudit.runtime.supervision.supervisor import job_folder

    root = tmp_path / "jobs"

    def make(_: int) -> bool:
        with job_folder(root) as folder:
            (folder / "job.json").write_text("{}")
            time.sleep(0.001)
            return (folder / "job.json").is_file()

    with ThreadPoolExecutor(8) as pool:
        kept = list(pool.map(make, range(800)))
    assert all(kept)
    assert list(root.iterdir()) == []
