"""A lingering fork server (ENVAUDIT_SERVER_IDLE_S): the next audit with the same interpreter,
environment and working folder joins it instead of importing torch again; it ends after its
idle time or when sys.path's folders change; a worker it forked still dies with its supervisor.

Real audits on the CPU (host runtime) and a real server; the servers live under a private
XDG_RUNTIME_DIR of each test, and whatever is left of them is killed at the end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envaudit.harness.forkserver import PRELOAD_MODE_ENV
from envaudit.runtime.supervision.launchers import SERVER_IDLE_ENV, server_home
from envaudit.runtime.supervision.launchers import process_running as alive
from envaudit.schema.progress import fork_exit_file
from tests.conftest import REPO
from tests.runtime.test_forkserver import audit_two_solutions

NOTES_PARENT = (
    """
    import os
    from pathlib import Path
    def run(x, lengths, scale):
        marks = Path(os.environ["EA_MARKS"])
        marks.mkdir(exist_ok=True)
        # the worker's judge forked this process; the server forked the judge
        judge = Path(f"/proc/{os.getppid()}/stat").read_text()
        (marks / str(os.getpid())).write_text(judge.rsplit(")", 1)[1].split()[1])
        return scaled(x, lengths, scale)
    """,
    False,
)

HANGS = (
    """
    import os
    import time
    from pathlib import Path
    def run(x, lengths, scale):
        marks = Path(os.environ["EA_MARKS"])
        marks.mkdir(exist_ok=True)
        # the worker's judge forked this process; the server forked the judge
        judge = Path(f"/proc/{os.getppid()}/stat").read_text()
        (marks / str(os.getpid())).write_text(judge.rsplit(")", 1)[1].split()[1])
        time.sleep(300)
    """,
    False,
)


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not alive(pid)


def parents(marks: Path) -> set[int]:
    return {int(path.read_text()) for path in marks.iterdir()}


@pytest.fixture
def lingering(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of an audit whose server lingers (120 s) in a folder of this test; the
    servers still running at the end are killed."""
    run = Path(tempfile.mkdtemp(prefix="ea-run-"))  # short: a socket's path has 107 bytes
    env = {
        SERVER_IDLE_ENV: "120",
        "XDG_RUNTIME_DIR": str(run),
        PRELOAD_MODE_ENV: "on-demand",
        "EA_MARKS": str(tmp_path / "marks"),
    }
    yield env
    for pid_file in run.glob("*/*/pid"):
        pid = int(pid_file.read_text())
        with contextlib.suppress(OSError):
            if b"envaudit.harness.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.killpg(pid, signal.SIGKILL)
    shutil.rmtree(run, ignore_errors=True)


def test_the_next_audit_joins_the_lingering_server(tmp_path: Path, lingering: dict) -> None:
    for name in ("first", "second"):
        done, lines = audit_two_solutions(tmp_path / name, {"a_notes": NOTES_PARENT}, lingering)
        assert done.returncode == 0, done.stdout + done.stderr
        assert [line["status"] for line in lines] == ["PASSED"] * len(lines), lines
        assert {line["phases_s"].get("worker_imports") for line in lines} <= {0.0, None}
    servers = parents(tmp_path / "marks")
    assert len(servers) == 1, servers  # both audits' workers were forked by one server
    (server,) = servers
    assert alive(server)  # it outlived both commands
    folder = next(Path(lingering["XDG_RUNTIME_DIR"]).glob("*/*/pid")).parent
    assert int((folder / "pid").read_text()) == server
    assert (folder.parent.stat().st_mode & 0o777) == 0o700


def test_a_changed_sys_path_folder_retires_the_server(tmp_path: Path, lingering: dict) -> None:
    """A distribution installed between two audits changes a folder on sys.path (here a file
    written into a PYTHONPATH folder): the server replies `stale`, the second audit starts a
    new one, and the old one ends."""
    extra = tmp_path / "site"
    extra.mkdir()
    paths = [str(extra), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**lingering, "PYTHONPATH": os.pathsep.join(paths)}
    done, _ = audit_two_solutions(tmp_path / "first", {"a_notes": NOTES_PARENT}, env)
    assert done.returncode == 0, done.stdout + done.stderr
    (first,) = parents(tmp_path / "marks")
    time.sleep(0.05)  # a distinct modification time
    (extra / "new_distribution-1.0.dist-info").mkdir()
    done, lines = audit_two_solutions(tmp_path / "second", {"a_notes": NOTES_PARENT}, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line["status"] for line in lines] == ["PASSED"] * len(lines), lines
    servers = parents(tmp_path / "marks")
    assert len(servers) == 2 and first in servers, servers
    assert wait_gone(first, 30), "the stale server did not end"


def test_a_worker_of_a_lingering_server_dies_with_its_supervisor(
    tmp_path: Path, lingering: dict
) -> None:
    """The worker's parent is the server, which lives on: the worker ends because the job's
    connection, held by the supervisor, reaches end of file when the supervisor is killed."""
    from tests.conftest import write_toy_root
    from tests.harness.test_faults import write_solution

    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "hangs", {"hangs": HANGS})
    argv = [sys.executable, "-m", "envaudit", "audit", "--device", "cpu", "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--out", str(tmp_path / "out"), "--suite", "all", "--timeout", "600"]
    cli = subprocess.Popen(
        argv, cwd=REPO, env={**os.environ, **lingering}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    marks = tmp_path / "marks"
    deadline = time.monotonic() + 120
    while not (marks.is_dir() and any(marks.iterdir())) and time.monotonic() < deadline:
        assert cli.poll() is None, "the audit ended before its worker ran"
        time.sleep(0.1)
    (mark,) = marks.iterdir()
    worker, server = int(mark.name), int(mark.read_text())
    cli.kill()
    cli.wait(timeout=30)
    assert wait_gone(worker, 15), "the worker outlived its supervisor"
    assert alive(server)  # the server lingers, without it


def test_an_idle_server_removes_its_socket_and_ends(tmp_path: Path) -> None:
    socket_path = tmp_path / "socket"
    server = subprocess.Popen(
        [sys.executable, "-m", "envaudit.harness.forkserver", "--idle-s", "1", str(socket_path)],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == b"ready"
        request = {
            "job_dir": str(tmp_path / "no-such-job"),
            "log": str(tmp_path / "log"),
            "env": {},
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(str(socket_path))
            conn.sendall((json.dumps(request) + "\n").encode())
            pid = json.loads(conn.makefile("rb").readline())["pid"]
            exit_file = fork_exit_file(socket_path, pid)
            deadline = time.monotonic() + 60
            while not exit_file.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert exit_file.read_text() == "1"  # the job folder is missing
        assert server.wait(timeout=30) == 0
        assert not socket_path.exists()
    finally:
        if server.poll() is None:
            server.kill()


def test_a_shared_server_folder_must_be_private(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    home = tmp_path / f"envaudit-servers-{os.getuid()}"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    assert server_home() is None  # others could reach the sockets: every server stays private
    home.chmod(0o700)
    assert server_home() == home
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / ("deep" * 30)))
    assert server_home() is None  # no room for a socket's path


def test_an_idle_time_that_is_not_a_number_is_a_usage_error(tmp_path: Path) -> None:
    done, _ = audit_two_solutions(
        tmp_path, {"a_notes": NOTES_PARENT}, {SERVER_IDLE_ENV: "soon", "EA_MARKS": str(tmp_path)}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{SERVER_IDLE_ENV}='soon'" in done.stdout + done.stderr


def test_a_dead_server_whose_pid_was_reused_is_replaced(tmp_path: Path, lingering: dict) -> None:
    """A server killed outright leaves its socket file, and its recorded pid may come to name
    another process (here this test's): the next audit must not take that process for the
    server (its connection would be refused, twice, and every worker start from scratch)."""
    done, _ = audit_two_solutions(tmp_path / "first", {"a_notes": NOTES_PARENT}, lingering)
    assert done.returncode == 0, done.stdout + done.stderr
    (first,) = parents(tmp_path / "marks")
    os.killpg(first, signal.SIGKILL)
    assert wait_gone(first, 15)
    folder = next(Path(lingering["XDG_RUNTIME_DIR"]).glob("*/*/pid")).parent
    assert (folder / "socket").exists()  # left behind
    (folder / "pid").write_text(str(os.getpid()))
    done, lines = audit_two_solutions(tmp_path / "second", {"a_notes": NOTES_PARENT}, lingering)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [line["status"] for line in lines] == ["PASSED"] * len(lines), lines
    assert {line["phases_s"].get("worker_imports") for line in lines} <= {0.0, None}
    assert len(parents(tmp_path / "marks") - {first, os.getpid()}) == 1  # a new server
