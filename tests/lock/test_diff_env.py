"""`envaudit diff-env`: two locks compared group by group, the groups that matter to a kernel
first; locks named by env, by file, or by a closure hash found in git history."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.schema.locks import Lock

REPO = Path(__file__).resolve().parents[2]


def diff_env(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["diff-env", *argv, "--locks-dir", str(REPO / "locks")])
    return result.exit_code, result.output


def test_flashmla_13_1_against_13_3_is_the_compiler_and_what_it_built() -> None:
    """And the base: 13.3 builds FlashMLA in its image, over noble-devbase (a compiler and
    git), where 13.1's wheel was built on the host and its image is over noble-minbase."""
    code, out = diff_env("flashmla-13.1", "flashmla-13.3")
    assert code == 1
    groups = [line.split(":")[0] for line in out.splitlines() if " differ, " in line]
    assert groups == ["CUDA toolchain", "source builds", "build flags and files", "base image"]
    assert "nvidia-cuda-nvcc     13.1.115" in out and "->  13.3.73" in out
    assert "flash-mla: build_env FLASH_MLA_SKIP_REG_SPILL_CHECK  (absent)  ->  1" in out
    assert "torch, Triton and CUDA libraries (17)" in out.splitlines()[-1]


def test_tilelang_0_1_12_against_0_1_15_is_one_package_as_json() -> None:
    code, out = diff_env("tilelang-0.1.12", "tilelang-0.1.15", "--json")
    assert code == 1
    found = json.loads(out)
    changed = [(g["group"], c["item"]) for g in found["groups"] for c in g["changes"]]
    assert changed == [("the env's own packages", "tilelang")]
    assert found["a"]["env"] == "tilelang-0.1.12" and not found["identical"]


def test_a_lock_against_itself_is_identical() -> None:
    code, out = diff_env("torch-cpu", str(REPO / "locks" / "torch-cpu" / "lock.json"))
    assert code == 0 and "identical" in out


def test_a_byte_identical_copy_elsewhere_is_identical(tmp_path: Path) -> None:
    """A copy away from its env.toml holds the same content: the env's own packages are read
    from both sides' env.toml together, so nothing moves between groups."""
    copy = tmp_path / "elsewhere" / "lock.json"
    copy.parent.mkdir()
    shutil.copyfile(REPO / "locks" / "torch-cpu" / "lock.json", copy)
    for argv in (("torch-cpu", str(copy)), (str(copy), "torch-cpu")):
        code, out = diff_env(*argv)
        assert code == 0 and "identical" in out, out


def test_a_lock_edited_by_hand_is_refused_wherever_it_is_given(tmp_path: Path) -> None:
    """numpy's version changed and the closure hash not: refused as `lock --check` refuses it
    (exit 1, "edited by hand"), never trusted by the hash it records ("one closure")."""
    lock = json.loads((REPO / "locks" / "torch-cpu" / "lock.json").read_text())
    [numpy] = [p for p in lock["packages"] if p["name"] == "numpy"]
    numpy["version"] = "0.0.1"
    edited = tmp_path / "lock.json"
    edited.write_text(json.dumps(lock))
    argv = ["bisect-env", "torch-cpu", str(edited), "--solution", "gemm_bf16_n6144_k4096-torch"]
    result = CliRunner().invoke(app, [*argv, "--locks-dir", str(REPO / "locks")])
    assert result.exit_code == 1 and "edited by hand" in result.output, result.output
    code, out = diff_env("torch-cpu", str(edited))
    assert code == 1 and "edited by hand" in out


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    done = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_closure_hash_the_lock_has_moved_on_from_is_read_from_git_history(
    tmp_path: Path,
) -> None:
    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks" / "torch-cpu", locks / "torch-cpu")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    first = git(tmp_path, "rev-parse", "HEAD")
    path = locks / "torch-cpu" / "lock.json"
    lock = json.loads(path.read_text())
    old = lock["closure_hash"]
    lock["python"] = "3.13"
    lock["closure_hash"] = Lock.model_validate(lock).computed_closure_hash()
    path.write_text(json.dumps(lock, indent=1))
    git(tmp_path, "commit", "-qam", "moved on")
    argv = ["diff-env", old[:12], "torch-cpu", "--locks-dir", str(locks)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert f"({first[:12]}:locks/torch-cpu/lock.json)" in result.output
    assert "Python: 1 differ, 1 equal" in result.output and "->  3.13" in result.output
    missing = CliRunner().invoke(
        app, ["diff-env", "0123abcd0123", "torch-cpu", "--locks-dir", str(locks)]
    )
    assert missing.exit_code == 2
    assert "no lock with closure hash 0123abcd0123" in missing.output


def test_a_substitute_base_s_closure_is_found_by_its_hash_now_and_in_history(
    tmp_path: Path,
) -> None:
    """A line run over a declared substitute base names that substitute's closure
    (locks/<env>/substitutes/<name>.json): it is found by its hash among the current locks,
    and, once the substitute's closure has moved on, in git history, with the env's folder;
    `reproduce` reruns it over the same substitute, asked for by name."""
    from types import SimpleNamespace

    from envaudit.commands.reproduce import _environment
    from envaudit.lock.history import find_lock

    locks = tmp_path / "locks"
    shutil.copytree(REPO / "locks" / "flashmla-13.3", locks / "flashmla-13.3")
    path = locks / "flashmla-13.3" / "substitutes" / "trixie-devbase.json"
    old = json.loads(path.read_text())["closure_hash"]
    found = find_lock(old[:16], locks)
    assert found.origin == str(path) and found.lock.substitute is not None
    assert found.env_toml is not None and "[[substitutes]]" in found.env_toml
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "first")
    first = git(tmp_path, "rev-parse", "HEAD")
    lock = json.loads(path.read_text())
    lock["env_vars"] = {**lock["env_vars"], "MOVED": "on"}
    lock["closure_hash"] = Lock.model_validate(lock).computed_closure_hash()
    path.write_text(json.dumps(lock, indent=1))
    git(tmp_path, "commit", "-qam", "moved on")
    argv = ["diff-env", old[:12], str(path), "--locks-dir", str(locks)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1, result.output
    assert f"({first[:12]}:locks/flashmla-13.3/substitutes/trixie-devbase.json)" in result.output
    notes: list[str] = []
    line: Any = SimpleNamespace(closure_hash=old)  # all _environment reads of a line
    env, env_locks, substitute = _environment(line, path, locks, tmp_path / "scratch", notes)
    assert (env, substitute) == ("flashmla-13.3", "trixie-devbase")
    kept = env_locks / "flashmla-13.3"
    assert (kept / "env.toml").is_file()
    assert (
        json.loads((kept / "substitutes" / "trixie-devbase.json").read_text())["closure_hash"]
        == old
    )
    assert "over the substitute base trixie-devbase" in notes[0] and first[:12] in notes[0]
