"""Usage and environment errors of `run`, `audit` and `check-inputs`: exit 2, one message naming
what is wrong, no traceback, and nothing written (no result line, no side file).

Each case is refused before any work: no worker starts, no environment is fetched or built.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import REPO, tree_digest, write_toy_root
from tests.harness.test_faults import write_solution

NO_GPU = "GPU-00000000-0000-0000-0000-000000000000"


@pytest.fixture
def scene(tmp_path: Path) -> dict[str, Path]:
    """A toy root, one correct solution declaring torch-cpu, and a folder for outputs."""
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    out = tmp_path / "out"
    out.mkdir()
    return {"root": root, "solutions": tmp_path / "solutions", "out": out, "tmp": tmp_path}


def invoke(argv: list[str], env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(app, argv, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        result.output,
        result.exception,
    )
    assert "Traceback" not in result.output
    return result


def run_argv(scene: dict[str, Path], *extra: str, report: Path | None = None) -> list[str]:
    argv = ["run", "--solution", "correct", "--runtime", "host", "--data-root", str(scene["root"])]
    argv += ["--solutions-root", str(scene["solutions"])]
    argv += ["--report", str(report or scene["out"] / "r.jsonl")]
    argv += ["--reference-cache", str(scene["tmp"] / "refcache")]
    return argv + list(extra)


def audit_argv(scene: dict[str, Path], *extra: str) -> list[str]:
    argv = ["audit", "--runtime", "host", "--data-root", str(scene["root"])]
    argv += ["--solutions-root", str(scene["solutions"]), "--out", str(scene["out"] / "a")]
    return argv + list(extra)


def assert_refused(result: Result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output, result.output


def assert_untouched(scene: dict[str, Path], before: dict[str, str]) -> None:
    assert tree_digest(scene["tmp"]) == before, "a refused command wrote a file"


@pytest.mark.parametrize("command", ["run", "audit"])
def test_a_gpu_that_is_not_here(scene: dict[str, Path], command: str) -> None:
    before = tree_digest(scene["tmp"])
    argv = run_argv(scene) if command == "run" else audit_argv(scene, "--solution", "correct")
    assert_refused(invoke([*argv, "--gpu", NO_GPU]), NO_GPU)
    assert_untouched(scene, before)


def test_a_gpu_is_checked_before_an_environment_is_made(
    scene: dict[str, Path], tmp_path: Path
) -> None:
    """--runtime local with an empty store: the GPU is refused, nothing is fetched."""
    store = tmp_path / "store"
    argv = run_argv(scene, "--gpu", NO_GPU)
    argv[argv.index("host")] = "local"
    variables = {"ENVAUDIT_STORE": str(store), "ENVAUDIT_CACHE": str(tmp_path / "cache")}
    result = invoke(argv, env=variables)
    assert_refused(result, NO_GPU)
    assert not store.exists() or not any(store.rglob("*")), "something was fetched"


@pytest.mark.parametrize("missing", [["torch"], ["safetensors"], ["torch", "safetensors"]])
def test_a_host_interpreter_without_torch(
    scene: dict[str, Path], monkeypatch: pytest.MonkeyPatch, missing: list[str]
) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        return None if name in missing else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    before = tree_digest(scene["tmp"])
    result = invoke(run_argv(scene, "--device", "cpu"))
    assert_refused(result, sys.executable, *missing, "--runtime local")
    assert "RUNTIME_ERROR" not in result.output
    assert_untouched(scene, before)
    result = invoke(audit_argv(scene, "--device", "cpu"))
    assert_refused(result, sys.executable, *missing, "--runtime local")
    assert_untouched(scene, before)


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "-inf", "1e400"])
@pytest.mark.parametrize("command", ["run", "audit"])
def test_timeouts_that_are_not_a_positive_number(
    scene: dict[str, Path], command: str, value: str
) -> None:
    before = tree_digest(scene["tmp"])
    argv = run_argv(scene) if command == "run" else audit_argv(scene)
    assert_refused(invoke([*argv, "--device", "cpu", f"--timeout={value}"]), "--timeout")
    assert_untouched(scene, before)


def test_a_reference_cache_that_is_a_file(scene: dict[str, Path]) -> None:
    cache = scene["tmp"] / "refcache"
    cache.write_text("not a folder")
    before = tree_digest(scene["tmp"])
    result = invoke(run_argv(scene, "--device", "cpu"))
    assert_refused(result, str(cache), "--reference-cache")
    assert_untouched(scene, before)


def test_a_reference_cache_under_a_file(scene: dict[str, Path]) -> None:
    (scene["tmp"] / "file").write_text("x")
    before = tree_digest(scene["tmp"])
    argv = run_argv(scene, "--device", "cpu")
    argv[argv.index("--reference-cache") + 1] = str(scene["tmp"] / "file" / "cache")
    assert_refused(invoke(argv), str(scene["tmp"] / "file"), "--reference-cache")
    assert_untouched(scene, before)


def test_check_inputs_of_a_definition_that_does_not_exist(scene: dict[str, Path]) -> None:
    argv = ["check-inputs", "--data-root", str(scene["root"]), "--definition", "nosuch"]
    assert_refused(invoke(argv), "nosuch", "toy_scale")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--solution", "nosuch"], ["nosuch", "correct"]),
        (["--suite", "nosuch"], ["nosuch", "smoke"]),
        (["--solution", "correct", "--solution", "../correct"], ["../correct"]),
    ],
)
def test_audit_names_that_do_not_exist(
    scene: dict[str, Path], extra: list[str], words: list[str]
) -> None:
    before = tree_digest(scene["tmp"])
    assert_refused(invoke(audit_argv(scene, "--device", "cpu", *extra)), *words)
    assert_untouched(scene, before)


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of locks/torch-cpu in a folder `run` reads as ./locks."""
    work = tmp_path / "work"
    shutil.copytree(REPO / "locks" / "torch-cpu", work / "locks" / "torch-cpu")
    shutil.copytree(REPO / "containers" / "bases", work / "containers" / "bases")
    monkeypatch.chdir(work)
    return work / "locks" / "torch-cpu"


def _stale(folder: Path) -> None:
    path = folder / "env.toml"
    text = path.read_text()
    assert 'OMP_NUM_THREADS = "2"' in text
    path.write_text(text.replace('OMP_NUM_THREADS = "2"', 'OMP_NUM_THREADS = "3"'))


def _edited(folder: Path) -> None:
    path = folder / "lock.json"
    lock = json.loads(path.read_text())
    lock["python"] = "3.0"
    path.write_text(json.dumps(lock))


def _missing(folder: Path) -> None:
    (folder / "lock.json").unlink()


@pytest.mark.parametrize("spoil", [_stale, _edited, _missing])
def test_running_in_a_lock_that_is_not_current(
    scene: dict[str, Path], locks: Path, spoil: object, tmp_path: Path
) -> None:
    assert callable(spoil)
    spoil(locks)
    argv = run_argv(scene, "--device", "cpu")
    argv[argv.index("host")] = "local"
    variables = {"ENVAUDIT_STORE": str(tmp_path / "store"), "ENVAUDIT_CACHE": str(tmp_path / "c")}
    result = invoke(argv, env=variables)
    assert_refused(result, "lock.json", "envaudit lock torch-cpu")
    assert not (scene["out"] / "r.jsonl").exists()
    assert not (tmp_path / "store").exists()


def read_only_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write in: chmod for a user, a read-only mount for root."""
    import os

    if os.getuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _, point, _, flags = line.split()[:4]
        if "ro" in flags.split(",") and Path(point).is_dir() and not os.access(point, os.W_OK):
            return Path(point)
    pytest.skip("running as root with no read-only mount to write into")


@pytest.mark.parametrize("place", ["read-only", "under-a-file", "a-folder"])
def test_a_report_that_cannot_be_written(scene: dict[str, Path], place: str) -> None:
    if place == "read-only":
        report = read_only_folder(scene["tmp"]) / "r.jsonl"
        words = [str(report), "not writable"]
    elif place == "under-a-file":
        (scene["tmp"] / "file").write_text("x")
        report = scene["tmp"] / "file" / "r.jsonl"
        words = [str(report), "is a file"]
    else:
        report = scene["out"] / "folder.jsonl"
        report.mkdir()
        words = [str(report), "is a folder"]
    before = tree_digest(scene["tmp"])
    listing = sorted(p.name for p in scene["out"].iterdir())
    assert_refused(invoke(run_argv(scene, "--device", "cpu", report=report)), "--report", *words)
    assert_untouched(scene, before)
    assert sorted(p.name for p in scene["out"].iterdir()) == listing, "a side file was left"


@pytest.mark.parametrize("place", ["a-file", "under-a-file", "results-is-a-folder"])
def test_an_audit_out_that_cannot_be_written(scene: dict[str, Path], place: str) -> None:
    out = scene["out"] / "a"
    if place == "a-file":
        out.write_text("x")
    elif place == "under-a-file":
        (scene["out"] / "file").write_text("x")
        out = scene["out"] / "file" / "a"
    else:
        (out / "results.jsonl").mkdir(parents=True)
    before = tree_digest(scene["tmp"])
    argv = audit_argv(scene, "--device", "cpu")
    argv[argv.index("--out") + 1] = str(out)
    assert_refused(invoke(argv), "--out", str(out))
    assert_untouched(scene, before)


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\x00\xff\xfe", b"# notes\nnot json\n"])
@pytest.mark.parametrize("command", ["run", "audit"])
def test_a_report_that_is_not_result_lines(
    scene: dict[str, Path], command: str, content: bytes
) -> None:
    """Given to --resume (or appended to): refused, and the file is left as it was."""
    if command == "run":
        report = scene["out"] / "r.jsonl"
        argv = run_argv(scene, "--device", "cpu", "--resume", report=report)
    else:
        report = scene["out"] / "a" / "results.jsonl"
        report.parent.mkdir()
        argv = audit_argv(scene, "--device", "cpu", "--resume")
    report.write_bytes(content)
    before = tree_digest(scene["tmp"])
    words = ["not UTF-8 JSON lines"] if content.startswith(b"\x89") else ["not JSON lines"]
    assert_refused(invoke(argv), str(report), *words)
    assert_untouched(scene, before)


def test_a_cache_folder_that_is_a_file(scene: dict[str, Path]) -> None:
    """ENVAUDIT_CACHE (job folders, environments) that cannot be a folder: refused up front."""
    cache = scene["tmp"] / "cache-file"
    cache.write_text("x")
    before = tree_digest(scene["tmp"])
    variables = {"ENVAUDIT_CACHE": str(cache)}
    result = invoke(run_argv(scene, "--device", "cpu"), env=variables)
    assert_refused(result, "ENVAUDIT_CACHE", str(cache))
    result = invoke(audit_argv(scene, "--device", "cpu"), env=variables)
    assert_refused(result, "ENVAUDIT_CACHE", str(cache))
    assert_untouched(scene, before)
