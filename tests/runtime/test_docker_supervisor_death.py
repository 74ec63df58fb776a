"""A worker container dies with its supervisor: SIGKILL of `envaudit run --runtime docker`
while the solution runs leaves neither a running nor an exited container of that job (the
host runtime's worker dies with its supervisor the same way). Needs the real engine and the
torch-cpu image, as tests/runtime/test_docker.py does (its fixture builds them)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docker.errors

from envaudit.image.engine import Engine
from envaudit.runtime.runtimes.docker import JOB_LABEL, labelled_containers
from tests.conftest import UUID_BLOB, write_toy_root
from tests.harness.test_faults import write_solution
from tests.runtime.test_docker import engine_env, pytestmark  # noqa: F401

KILLED_WITHIN_S = 10.0


def begun(job: Path) -> bool:
    """Whether the worker has begun a workload (a `begin` event, sealed or not)."""
    try:
        text = (job / "progress.jsonl").read_text()
    except OSError:
        return False
    return '"begin"' in text or '\\"begin\\"' in text


def job_containers(engine: Engine, cache: Path) -> list[tuple[Any, Path]]:
    """Worker containers (any state) whose job folder is under this test's cache, with it."""
    found = labelled_containers(engine, JOB_LABEL)
    jobs = [(c, Path(labels[JOB_LABEL])) for c, labels in found]
    return [(c, job) for c, job in jobs if job.is_relative_to(cache)]


def wait_for(what: str, test: Any, timeout: float, state: Any = None) -> Any:
    """`test()` once it is true; else fail, saying what `state()` shows (on a CI machine that
    fails this, the containers' states and the supervisor's output are all there is to read)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = test()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {timeout:.0f} s; {state() if state else ''}")


def describe(engine: Engine, cache: Path, supervisor: subprocess.Popen[bytes], log: Path) -> str:
    """The job's containers with their states, and the supervisor's exit and output so far."""
    states = [(c.short_id, c.status, begun(job)) for c, job in job_containers(engine, cache)]
    told = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    return f"containers (id, state, begun): {states}; supervisor exit {supervisor.poll()}: {told}"


def test_sigkill_of_the_supervisor_removes_its_worker_container(
    engine_env: dict[str, str],  # noqa: F811
    tmp_path: Path,
) -> None:
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "hang")
    cache = Path(engine_env["ENVAUDIT_CACHE"])
    argv = [sys.executable, "-m", "envaudit", "run", "--solution", "hang", "--runtime", "docker"]
    argv += ["--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--workload", UUID_BLOB]
    argv += ["--report", str(tmp_path / "r.jsonl"), "--timeout", "300"]
    engine = Engine.connect()
    log = tmp_path / "supervisor.log"  # a file, not a pipe: nothing here reads while it runs
    with log.open("wb") as told:
        supervisor = subprocess.Popen(
            argv, env={**os.environ, **engine_env}, stdout=subprocess.DEVNULL, stderr=told
        )
    try:
        state = lambda: describe(engine, cache, supervisor, log)  # noqa: E731
        running = wait_for(
            "the hanging solution's container runs its workload",
            lambda: [c for c, job in job_containers(engine, cache) if begun(job)],
            180,
            state,
        )
        assert len(running) == 1
        supervisor.send_signal(signal.SIGKILL)
        supervisor.wait(10)
        wait_for(
            "the worker container is gone after its supervisor was killed",
            lambda: not job_containers(engine, cache),
            KILLED_WITHIN_S,
            state,
        )
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
        for container, _ in job_containers(engine, cache):
            with contextlib.suppress(docker.errors.APIError):  # the reaper may be at it too
                container.remove(force=True)
