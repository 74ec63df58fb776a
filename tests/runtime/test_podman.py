"""The podman runtime for real: a worker container started by podman 4.3 (Debian bookworm's)
through its Docker-compatible API, on a socket of this module's own, running a baseline's smoke
suite in the torch-cpu image and judged as in Docker.

Two things stopped podman on these machines until its containers were asked for what they need:
`init=True` (the worker's PID 1 reaps its children) wants podman's init binary, catatonit (a
package of its own in Debian), and podman asks the OCI runtime for nofile 1048576 and nproc
4194304, beyond the machine's hard limits ("error setting rlimit type 7: operation not
permitted"); the runtime now passes the caller's open-file limit and the pids limit
(runtime/runtimes/docker.py, engine_limits). The image is built by Docker (tests/runtime/
test_docker.py builds it the same way) and handed to podman with `docker save | podman load`:
a build through podman itself took 280 s here, too long for CI; docs/containers.md has it."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from envaudit import settings
from envaudit.image.build import plan_build
from envaudit.image.engine import Engine, EngineError
from envaudit.runtime.runtimes.docker import JOB_LABEL, labelled_containers
from envaudit.schema.results import read_lines
from tests.conftest import REPO, SHIPPED_ROOT, skip_unless_ready
from tests.harness.test_baselines_cpu import SOLUTIONS
from tests.runtime.test_docker import REASON as DOCKER_REASON
from tests.runtime.test_docker import invoke

SOLUTION = "dense_attention_h16_d72-torch"


def _why_skip() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed"
    if DOCKER_REASON is not None:
        return f"the image is built with Docker: {DOCKER_REASON}"
    return None


REASON = _why_skip()
pytestmark = skip_unless_ready(REASON, settings.REQUIRE_PODMAN)


@pytest.fixture(scope="module")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """podman's API service on a socket of its own, holding the torch-cpu image."""
    base = tmp_path_factory.mktemp("podman")
    socket = f"unix://{base / 'podman.sock'}"
    env = {"ENVAUDIT_STORE": str(base / "store"), "ENVAUDIT_CACHE": str(base / "cache")}
    code, out = invoke(["fetch", "torch-cpu", "--locks-dir", str(REPO / "locks")], env)
    assert code == 0, out
    for argv in (["base", "build", "bookworm-minbase"], ["build", "--env", "torch-cpu"]):
        code, out = invoke(argv, env)  # with Docker; both are cached where they were built
        assert code == 0, out
    tag = plan_build("torch-cpu").image.tag
    save = subprocess.Popen(["docker", "save", tag], stdout=subprocess.PIPE)
    assert save.stdout is not None
    loader = subprocess.Popen(
        ["podman", "load"], stdin=save.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # Only podman may hold the pipe's reading end: should it stop early (a full disk),
    # `docker save` then gets a broken pipe instead of blocking for ever on a reader that
    # never reads (the fixture once held the other end and waited without a limit).
    save.stdout.close()
    try:
        _, told = loader.communicate(timeout=600)  # bounded: a stalled engine fails the fixture
    finally:
        for process in (save, loader):
            if process.poll() is None:
                process.kill()
    saved = save.wait(timeout=60)
    assert loader.returncode == 0 and saved == 0, (saved, told.decode(errors="replace"))
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", socket],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        env["CONTAINER_HOST"] = socket
        _wait_for(socket)
        yield env
    finally:
        service.terminate()
        service.wait(timeout=30)
        shutil.rmtree(base, ignore_errors=True)


def _wait_for(socket: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with mock.patch.dict(os.environ, {"CONTAINER_HOST": socket}):
                Engine.connect("podman")
            return
        except EngineError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_baseline_passes_in_a_podman_container(
    podman_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", SOLUTION, "--runtime", "podman", "--env", "torch-cpu"]
    argv += ["--device", "cpu", "--suite", "smoke", "--data-root", str(SHIPPED_ROOT)]
    argv += ["--solutions-root", str(SOLUTIONS), "--report", str(report)]
    code, out = invoke(argv, podman_env)
    lines = [line for _, line in read_lines(report) if line]
    assert code == 0 and lines, out
    assert {line["status"] for line in lines} == {"PASSED"}
    context = lines[0]["context"]
    assert context["runtime"] == "podman" and context["env"] == "torch-cpu"
    monkeypatch.setenv("CONTAINER_HOST", podman_env["CONTAINER_HOST"])
    engine = Engine.connect("podman")
    assert context["image_id"] == engine.image(plan_build("torch-cpu").image.tag).id
    # the worker's container went with its job
    left = labelled_containers(engine, JOB_LABEL)
    cache = podman_env["ENVAUDIT_CACHE"]
    assert not [labels for _, labels in left if labels.get(JOB_LABEL, "").startswith(cache)]
