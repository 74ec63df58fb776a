"""The dataset's faults are the dataset's, and only the judge may say so.

A reference that exits, returns a shape its definition contradicts, or returns no finite value
gives a correct solution WORKLOAD_ERROR with a message naming the reference, never a status
that blames the solution; a definition whose reference does not parse is named as the dataset's
refused file. The other way round, a wrong solution that rewrites its own account to accuse the
dataset (WORKLOAD_ERROR) or the device (UNSUPPORTED_DEVICE) gets the judge's own verdict (or
RUNTIME_ERROR where it has none): those statuses
stand only where the judge finds the same fault itself. Each runs through `envaudit run` on the
CPU with the toy definition of conftest.py.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REFERENCE, UUID_BLOB, write_toy_root
from tests.harness.test_faults import write_solution

FAULTY_REFERENCES = {
    "sys_exit": (
        REFERENCE.replace("    out = torch.zeros_like(x)", "    raise SystemExit(3)"),
        "reference called sys.exit(3)",
    ),
    "os_exit": (
        REFERENCE.replace("    out = torch.zeros_like(x)", "    import os\n    os._exit(0)"),
        "reference called os._exit(0)",
    ),
    "wrong_shape": (
        REFERENCE.replace("    return out", "    return out[:, :1]"),
        "returned output out of shape",
    ),
    "all_nan": (
        REFERENCE.replace("    return out", "    return out * float('nan')"),
        "with no finite element",
    ),
}

FORGING = {
    # A wrong answer whose account, rewritten in its own process, accuses someone else.
    "blames_the_dataset": "WORKLOAD_ERROR",
    "blames_the_device": "UNSUPPORTED_DEVICE",
}
FORGER = """
import gc
from envaudit.harness.judge import Link

def _rewrite(status):
    for obj in gc.get_objects():
        if isinstance(obj, Link) and not getattr(obj, "_rewritten", False):
            send = obj.send
            def forged(kind, **fields):
                if kind == "result":
                    fields["outcome"] = {"status": status, "message": "not my fault"}
                return send(kind, **fields)
            obj.send = forged
            obj._rewritten = True

def run(x, lengths, scale):
    _rewrite(STATUS)
    return scaled(x, lengths, scale) + 1.0
"""


def run_one(root: Path, solutions: Path, name: str, report: Path) -> int:
    argv = ["run", "--solution", name, "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions), "--report", str(report), "--timeout", "30"]
    argv += ["--suite", "smoke"]
    return CliRunner().invoke(app, argv).exit_code


def lines_of(report: Path) -> list[dict]:
    return [json.loads(x) for x in report.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("fault", sorted(FAULTY_REFERENCES))
def test_a_faulty_reference_is_the_dataset_s_fault(tmp_path: Path, fault: str) -> None:
    source, words = FAULTY_REFERENCES[fault]
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    path.write_text(json.dumps({**definition, "reference": source}))
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    report = tmp_path / "results.jsonl"
    code = run_one(root, solutions, "correct", report)
    [line] = lines_of(report)  # the smoke suite: one workload
    assert line["workload"]["uuid"] == UUID_BLOB
    assert (line["status"], code) == ("WORKLOAD_ERROR", 1), line["message"]
    assert words in line["message"], line["message"]


def test_a_reference_that_does_not_parse_names_the_refused_file(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    path.write_text(json.dumps({**definition, "reference": "def run(x:\n    return x\n"}))
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    argv = ["run", "--solution", "correct", "--device", "cpu", "--data-root", str(root)]
    result = CliRunner().invoke(app, [*argv, "--solutions-root", str(solutions)])
    assert result.exit_code == 2, result.output
    assert "definition file is refused" in result.output, result.output
    assert "definitions/toy/toy_scale.json" in result.output
    assert "reference is not valid Python (line 1" in result.output, result.output


@pytest.mark.parametrize("name", sorted(FORGING))
def test_a_solution_cannot_turn_its_failure_into_someone_else_s(tmp_path: Path, name: str) -> None:
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    body = FORGER.replace("STATUS", repr(FORGING[name]))
    write_solution(solutions, name, {name: (body, False)})
    report = tmp_path / "results.jsonl"
    code = run_one(root, solutions, name, report)
    [line] = lines_of(report)
    assert (line["status"], code) == ("INCORRECT_NUMERICAL", 1), line["message"]
    assert f"reported {FORGING[name]}" in line["message"], line["message"]
    assert "which the judge did not find" in line["message"]
    assert "the judge's own verdict: out:" in line["message"]


LEAVER = """
import subprocess
from pathlib import Path

def run(x, lengths, scale):
    mark = Path(MARK)
    if not mark.exists():
        child = subprocess.Popen(["sleep", "300"], start_new_session=True)
        mark.write_text(str(child.pid))
    return scaled(x, lengths, scale)
"""


def test_nothing_a_job_started_outlives_it(tmp_path: Path) -> None:
    """A child the solution starts in a session of its own is adopted by the judge (a child
    subreaper) and killed when the job ends."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    mark = tmp_path / "child.pid"
    body = LEAVER.replace("MARK", repr(str(mark)))
    write_solution(solutions, "leaves_a_child", {"leaves_a_child": (body, False)})
    report = tmp_path / "results.jsonl"
    code = run_one(root, solutions, "leaves_a_child", report)
    [line] = lines_of(report)
    assert (line["status"], code) == ("PASSED", 0), line["message"]
    pid = int(mark.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_nothing_a_job_started_outlives_its_timeout(tmp_path: Path) -> None:
    """Killed on its timeout, the judge cannot end its job's processes: the fork server that
    forked it adopts them (a child subreaper) and kills them."""
    root = write_toy_root(tmp_path / "data")
    solutions = tmp_path / "solutions"
    mark = tmp_path / "child.pid"
    body = LEAVER.replace("MARK", repr(str(mark))).replace(
        "    return scaled(", "    __import__('time').sleep(600)\n    return scaled("
    )
    write_solution(solutions, "hangs", {"hangs": (body, False)})
    report = tmp_path / "results.jsonl"
    argv = ["run", "--solution", "hangs", "--device", "cpu", "--data-root", str(root)]
    # the call sleeps 600 s: the limit, waited out whole, only has to come before that
    argv += ["--solutions-root", str(solutions), "--report", str(report), "--timeout", "5"]
    code = CliRunner().invoke(app, [*argv, "--suite", "smoke"]).exit_code
    [line, *_] = lines_of(report)
    assert (line["status"], code) == ("TIMEOUT", 1), line["message"]
    pid = int(mark.read_text())
    stat = Path(f"/proc/{pid}/stat")
    deadline = time.monotonic() + 10
    while stat.exists() and time.monotonic() < deadline:
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.1)
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_nothing_a_reference_started_outlives_the_job(tmp_path: Path) -> None:
    """A reference runs in the judge: a child it starts in a session of its own, and a fork of
    the judge itself (a copy holding the judge's keys) in a group of its own, both outliving
    the call, are ended with the job."""
    root = write_toy_root(tmp_path / "data")
    marks = tmp_path / "marks"
    marks.mkdir()
    leaving = (
        "    import os, subprocess, pathlib, time\n"
        f"    marks = pathlib.Path({str(marks)!r})\n"
        "    if not list(marks.iterdir()):\n"
        "        child = subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "        (marks / 'child').write_text(str(child.pid))\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            os.setpgid(0, 0)\n"
        "            time.sleep(300)\n"
        "            os._exit(0)\n"
        "        (marks / 'fork').write_text(str(pid))\n"
        "    out = torch.zeros_like(x)"
    )
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    source = REFERENCE.replace("    out = torch.zeros_like(x)", leaving)
    path.write_text(json.dumps({**definition, "reference": source}))
    solutions = tmp_path / "solutions"
    write_solution(solutions, "correct")
    report = tmp_path / "results.jsonl"
    assert run_one(root, solutions, "correct", report) == 0
    for name in ("child", "fork"):
        stat = Path(f"/proc/{int((marks / name).read_text())}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", name
