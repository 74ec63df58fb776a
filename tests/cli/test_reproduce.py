"""`envaudit reproduce`: a recorded line run again in what it records, on the CPU (the host
runtime), with its solution revision found in git history when the folder has moved on; every
reason it cannot be attempted is exit 2 with that reason."""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution


def git(repo: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A repository with the toy dataset and one solution, and one line recorded from it."""
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "correct", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "solutions"), "--report", str(report)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    return tmp_path


def reproduce(where: Path, spec: str, *extra: str) -> Result:
    argv = ["reproduce", spec, "--data-root", str(where / "data"), "--out", str(where / "again")]
    argv += ["--solutions-root", str(where / "solutions"), *extra]
    return CliRunner().invoke(app, argv)


def test_a_cpu_line_runs_again_side_by_side(recorded: Path) -> None:
    result = reproduce(recorded, f"{recorded / 'r.jsonl'}:1")
    assert result.exit_code in (0, 1), result.output
    out = result.output
    assert "solution correct: the current revision" in out and "device: the CPU" in out
    assert "status" in out and out.count("PASSED") >= 2 and "now / then" in out
    verdict = out.strip().splitlines()[-1]
    assert verdict in ("verdict: same", "verdict: faster", "verdict: slower")
    assert (result.exit_code == 0) == (verdict == "verdict: same")
    [again] = (recorded / "again" / "reproduce.jsonl").read_text().splitlines()
    assert json.loads(again)["solution"] == "correct"


def test_the_rerun_leaves_no_scratch_folder_behind(
    recorded: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The revisions and locks rebuilt for the rerun go with it (152 staging folders were left
    in the temp folder after one session of probes)."""
    temp = recorded / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    result = reproduce(recorded, f"{recorded / 'r.jsonl'}:1")
    assert result.exit_code in (0, 1), result.output
    assert not list(temp.glob("envaudit-reproduce-*"))


def test_an_old_revision_comes_from_git_history(recorded: Path) -> None:
    git(recorded, "init", "-q")
    git(recorded, "add", "solutions", "data")
    git(recorded, "commit", "-qm", "recorded")
    main = recorded / "solutions" / "correct" / "main.py"
    main.write_text(main.read_text() + "\n# changed since\n")
    git(recorded, "commit", "-qam", "moved on")
    result = reproduce(recorded, f"{recorded / 'r.jsonl'}:1", "--json")
    assert result.exit_code in (0, 1), result.output
    found = json.loads(result.output)
    assert any("from commit" in note for note in found["notes"])
    assert found["status"] == ["PASSED", "PASSED"]


def test_a_revision_no_commit_holds_cannot_be_attempted(recorded: Path) -> None:
    main = recorded / "solutions" / "correct" / "main.py"
    main.write_text(main.read_text() + "\n# changed, never committed\n")
    result = reproduce(recorded, f"{recorded / 'r.jsonl'}:1")
    assert result.exit_code == 2
    assert "is neither the current one" in result.output
    assert "nor in any commit" in result.output


def edited(where: Path, change: dict) -> str:
    line = json.loads((where / "r.jsonl").read_text().splitlines()[0])
    for key, value in change.items():
        line[key] = {**(line.get(key) or {}), **value}
    (where / "edited.jsonl").write_text(json.dumps(line) + "\n")
    return f"{where / 'edited.jsonl'}:1"


def test_a_closure_no_commit_has_cannot_be_attempted(recorded: Path) -> None:
    spec = edited(recorded, {"context": {"closure_hash": "ab" * 32}})
    result = reproduce(recorded, spec)
    assert result.exit_code == 2
    assert "no lock with closure hash abababab" in result.output


def test_a_gpu_line_needs_a_gpu_of_its_model(recorded: Path) -> None:
    spec = edited(
        recorded, {"environment": {"device_type": "cuda", "gpu_name": "NVIDIA B300 SXM6"}}
    )
    result = reproduce(recorded, spec)
    assert result.exit_code == 2
    assert "the line ran on an NVIDIA B300 SXM6; this machine has" in result.output


def test_a_line_must_be_named_exactly(recorded: Path) -> None:
    result = reproduce(recorded, str(recorded / "r.jsonl"))
    assert result.exit_code == 2 and "name one line" in result.output
    result = reproduce(recorded, f"{recorded / 'r.jsonl'}:9")
    assert result.exit_code == 2 and "has no line 9" in result.output


def test_a_flashinfer_bench_trace_runs_in_the_declared_env(recorded: Path) -> None:
    """A trace records no closure of ours: the run says it used the solution's declared env."""
    argv = ["merge", str(recorded / "r.jsonl"), "--out", str(recorded / "out")]
    argv += ["--data-root", str(recorded / "data"), "--solutions-root", str(recorded / "solutions")]
    assert CliRunner().invoke(app, argv).exit_code == 0
    [path] = (recorded / "out" / "traces").rglob("*.jsonl")
    trace = json.loads(path.read_text().splitlines()[0])
    trace["evaluation"]["environment"]["libs"] = {"torch": "2.11.0"}  # a trace from elsewhere
    (recorded / "trace.jsonl").write_text(json.dumps(trace) + "\n")
    result = reproduce(recorded, f"{recorded / 'trace.jsonl'}:1")
    assert result.exit_code in (0, 1), result.output
    assert "running in the solution's declared env torch-cpu instead" in result.output


def test_the_revision_hash_is_the_one_the_harness_records(recorded: Path) -> None:
    """schema's solution_source_hash and the harness's own copy agree (the harness imports
    nothing of envaudit), on the recorded line's own sources."""
    from envaudit.harness.solution import hash_sources
    from envaudit.schema.models import solution_source_hash

    folder = recorded / "solutions" / "correct"
    files = {"main.py": (folder / "main.py").read_bytes(), "sub/x.py": b"y = 1\n"}
    assert solution_source_hash(files) == hash_sources(files)
    line = json.loads((recorded / "r.jsonl").read_text().splitlines()[0])
    assert line["solution_hash"] == solution_source_hash({"main.py": files["main.py"]})


def test_a_flashinfer_bench_solution_runs_again_from_its_file_and_its_history(
    tmp_path: Path,
) -> None:
    """A solution in FlashInfer-Bench's layout (one file, sources inline, in the data root's
    solutions/): reproduced from the current file, then, once the file has moved on, from the
    commit that held the recorded revision, never from the newer file of the same name."""
    from tests.dataset.test_solution_layouts import fib_solution, nested_path, write_nested_root

    solution = fib_solution("fib-one")
    root = write_nested_root(tmp_path / "fib", solution)
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "fib-one", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(tmp_path / "none"), "--report", str(report)]
    assert CliRunner().invoke(app, argv).exit_code == 0
    ask = ["reproduce", f"{report}:1", "--data-root", str(root), "--json"]
    ask += ["--solutions-root", str(tmp_path / "none"), "--out", str(tmp_path / "again")]
    current = CliRunner().invoke(app, ask)
    assert current.exit_code in (0, 1), current.output
    assert any("the current revision" in n for n in json.loads(current.output)["notes"])

    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-qm", "recorded")
    file = nested_path(root, solution)
    changed = json.loads(file.read_text())
    changed["sources"][0]["content"] = "def run(x, scale):\n    return x * 0\n"  # now wrong
    file.write_text(json.dumps(changed))
    git(root, "commit", "-qam", "moved on")
    again = CliRunner().invoke(app, ask)
    assert again.exit_code in (0, 1), again.output
    found = json.loads(again.output)
    assert any("from commit" in note for note in found["notes"]), found["notes"]
    assert set(found["status"]) == {"PASSED"}  # the recorded revision ran, not the wrong one


def test_a_line_over_a_substitute_base_is_not_rerun_in_the_local_runtime(recorded: Path) -> None:
    """A line measured over a declared substitute base names that substitute's closure: its
    rerun asks for the same substitute, which only a container runtime can give; the local
    runtime (which would make the declared closure instead) refuses it, exit 2."""
    from tests.conftest import REPO

    locks = REPO / "locks"
    closure = json.loads((locks / "flashmla-13.3/substitutes/trixie-devbase.json").read_text())
    spec = edited(recorded, {"context": {"closure_hash": closure["closure_hash"]}})
    result = reproduce(recorded, spec, "--runtime", "local", "--locks-dir", str(locks))
    assert result.exit_code == 2, result.output
    assert "--substitute-base 'trixie-devbase' does not apply to the local runtime" in result.output
