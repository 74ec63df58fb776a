"""Workers forked from a fork server (envaudit.harness.forkserver) are as isolated as workers
started as fresh interpreters: one solution's changes to the process never reach the next job.

Two solutions of the toy definition in one `envaudit audit` on the CPU: the first marks the
torch module it was given and leaves a thread running; the second fails if it sees either. With
the fork server (the default) and without it (ENVAUDIT_FORKSERVER=0), both pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, write_toy_root
from tests.harness.test_faults import write_solution

SOLUTIONS = {
    "a_marks": (
        """
        import threading
        import time
        def run(x, lengths, scale):
            torch._envaudit_marked_by = "a_marks"
            threading.Thread(target=time.sleep, args=(60,), name="left-by-a", daemon=True).start()
            return scaled(x, lengths, scale)
        """,
        False,
    ),
    "b_checks": (
        """
        import threading
        def run(x, lengths, scale):
            if hasattr(torch, "_envaudit_marked_by"):
                raise RuntimeError("torch was marked by " + torch._envaudit_marked_by)
            if any(t.name == "left-by-a" for t in threading.enumerate()):
                raise RuntimeError("a thread of another solution is running here")
            return scaled(x, lengths, scale)
        """,
        False,
    ),
}


def audit_two_solutions(
    tmp_path: Path, sources: dict[str, tuple[str, bool]], env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    """Write `sources` as solutions of the toy definition, audit all of them on the CPU (host
    runtime) and return the finished command and its result lines."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    for name in sources:
        write_solution(solutions, name, sources)
    out = tmp_path / "audit"
    argv = [sys.executable, "-m", "envaudit", "audit", "--device", "cpu", "--runtime", "host"]
    argv += ["--data-root", str(root), "--solutions-root", str(solutions), "--out", str(out)]
    argv += ["--suite", "all", "--timeout", "60"]
    env = {**os.environ, **(env or {})}
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    lines = [json.loads(raw) for raw in (out / "results.jsonl").read_text().splitlines()]
    return done, lines


@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_each_job_gets_a_clean_process(tmp_path: Path, forkserver: str) -> None:
    done, lines = audit_two_solutions(tmp_path, SOLUTIONS, {"ENVAUDIT_FORKSERVER": forkserver})
    assert done.returncode == 0, done.stdout + done.stderr
    statuses = {(line["solution"], line["status"]) for line in lines}
    assert statuses == {("a_marks", "PASSED"), ("b_checks", "PASSED")}, [
        line.get("message") for line in lines
    ]
    forked = [line for line in lines if "worker_start" in line["phases_s"]]
    assert len(forked) == 2  # one worker per job
    imports = [line["phases_s"]["worker_imports"] for line in forked]
    if forkserver == "1":
        assert imports == [0.0, 0.0]  # imported once, by the server
    else:
        assert min(imports) > 0.1


PRELOAD_SOLUTIONS = {
    "a_first": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)\n", False),
    "b_second": (
        """
        import sys
        def run(x, lengths, scale):
            if "torch._dynamo" not in sys.modules:
                raise RuntimeError("torch._dynamo was not imported before this solution")
            return scaled(x, lengths, scale)
        """,
        False,
    ),
}


def test_workers_after_the_first_find_dynamo_imported(tmp_path: Path) -> None:
    """The server imports torch._dynamo once its first worker is forked (forkserver.PRELOAD):
    the second job's worker starts with it, as FlexAttention and torch.compile need it."""
    done, lines = audit_two_solutions(tmp_path, PRELOAD_SOLUTIONS)
    by_solution = {line["solution"]: line["status"] for line in lines}
    assert by_solution == {"a_first": "PASSED", "b_second": "PASSED"}, done.stdout + done.stderr
