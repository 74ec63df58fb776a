"""Hostile inputs to the CLI: paths where names go, device files and FIFOs where files go, deep
JSON and binary bytes where data goes, the empty path, repeated names. Each is refused with
exit 2 and a message naming what was given (or, for repeats, done once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import REPO, UUID_BLOB, write_toy_root
from tests.harness.test_faults import write_solution


def invoke(*argv: str, cwd: Path | None = None) -> Result:
    if cwd is None:
        return CliRunner().invoke(app, list(argv))
    before = Path.cwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(app, list(argv))
    finally:
        os.chdir(before)


def refused(result: Result, *words: str, code: int = 2) -> None:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    for word in words:
        assert word in result.output, (word, result.output)


def envaudit(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command in its own process, so that a hang is a failed test, not a hung suite."""
    return subprocess.run(
        [sys.executable, "-m", "envaudit", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    (tmp_path / "sub").mkdir()
    return {"root": root, "solutions": tmp_path / "solutions", "base": tmp_path}


def run_args(places: dict[str, Path], *extra: str) -> list[str]:
    return [
        "run", "--runtime", "host", "--device", "cpu", "--data-root", str(places["root"]),
        "--solutions-root", str(places["solutions"]), *extra,
    ]  # fmt: skip


# ---------------------------------------------------------------- names that are paths


def test_run_refuses_a_solution_path(places: dict[str, Path]) -> None:
    argv = run_args(places, "--solution", "../solutions/correct")
    result = invoke(*argv, cwd=places["base"] / "sub")
    refused(result, "--solution", "'../solutions/correct'", "path separator")


def test_audit_refuses_a_solution_path(places: dict[str, Path]) -> None:
    result = invoke(
        "audit", "--runtime", "host", "--device", "cpu", "--solution", "../solutions/correct",
        "--data-root", str(places["root"]), "--solutions-root", str(places["solutions"]),
        "--out", str(places["base"] / "out"), cwd=places["base"] / "sub",
    )  # fmt: skip
    refused(result, "--solution", "'../solutions/correct'", "path separator")


def test_build_refuses_a_solution_path() -> None:
    result = invoke("build", "--solution", "../solutions/x", "--dry-run")
    refused(result, "--solution", "'../solutions/x'", "path separator")


def test_base_build_refuses_a_path() -> None:
    result = invoke("base", "build", "../../etc/passwd")
    refused(result, "'../../etc/passwd'", "path separator")


# ---------------------------------------------------------------- repeated names


def test_a_repeated_workload_runs_once(places: dict[str, Path]) -> None:
    report = places["base"] / "r.jsonl"
    argv = run_args(places, "--solution", "correct", "--report", str(report), "--validation-only")
    result = invoke(*argv, "--workload", UUID_BLOB, "--workload", UUID_BLOB)
    assert result.exit_code in (0, 1), result.output  # the solution's verdict is not the point
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    assert [x["workload"]["uuid"] for x in lines] == [UUID_BLOB]


def test_a_repeated_solution_is_audited_once(places: dict[str, Path]) -> None:
    out = places["base"] / "out"
    result = invoke(
        "audit", "--runtime", "host", "--device", "cpu", "--suite", "smoke",
        "--solution", "correct", "--solution", "correct", "--data-root", str(places["root"]),
        "--solutions-root", str(places["solutions"]), "--out", str(out),
    )  # fmt: skip
    assert result.exit_code in (0, 1), result.output
    assert result.output.count(": correct on cpu") == 2, result.output  # its start, its end
    assert "audit [1/1 done]: correct on cpu: 1 " in result.output, result.output
    assert f"envaudit merge {out / 'results.jsonl'} --out {out / 'report'}" in result.output
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 1, lines


# ---------------------------------------------------------------- files that are not files


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo.jsonl"
    os.mkfifo(path)
    return path


DEVICES = ["/dev/zero", "/dev/full", "/dev/null"]


@pytest.mark.parametrize("device", [*DEVICES, "FIFO"])
def test_merge_refuses_a_device_or_fifo(device: str, fifo: Path, tmp_path: Path) -> None:
    given = str(fifo) if device == "FIFO" else device
    done = envaudit("merge", given, "--out", str(tmp_path / "out"))
    assert done.returncode == 2, done.stderr
    assert f"{given}: " in done.stderr and "not a regular file" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("device", [*DEVICES, "FIFO"])
def test_run_refuses_a_report_that_is_a_device_or_fifo(
    device: str, fifo: Path, places: dict[str, Path]
) -> None:
    given = str(fifo) if device == "FIFO" else device
    argv = run_args(places, "--solution", "correct", "--report", given, "--validation-only")
    done = envaudit(*argv)
    assert done.returncode == 2, done.stderr
    assert f"--report {given}" in done.stderr and "not a regular file" in done.stderr
    assert not Path(given + ".logs").exists()


@pytest.mark.parametrize("device", ["/dev/zero", "FIFO"])
def test_reproduce_refuses_a_device_or_fifo(device: str, fifo: Path) -> None:
    given = str(fifo) if device == "FIFO" else device
    done = envaudit("reproduce", f"{given}:1")
    assert done.returncode == 2, done.stderr
    assert given in done.stderr and "not a regular file" in done.stderr, done.stderr


def test_a_line_longer_than_the_bound_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    from envaudit.schema.reading import MAX_LINE_BYTES

    path = tmp_path / "long.jsonl"
    with path.open("wb") as handle:
        handle.write(b"{}\n")
        handle.write(b" " * (MAX_LINE_BYTES + 1))
    result = invoke("merge", str(path), "--out", str(tmp_path / "out"))
    refused(result, f"{path}:2", "longer than")


# ---------------------------------------------------------------- nesting and binary bytes

DEEP = "[" * 100_000 + "]" * 100_000


def test_merge_skips_a_deeply_nested_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(DEEP + "\n")
    result = invoke("merge", str(path), "--out", str(tmp_path / "out"))
    refused(result, f"{path}:1", "nested too deeply", code=2)  # no usable line, as compare


def test_check_inputs_reports_a_deeply_nested_definition(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    (root / "definitions" / "toy" / "deep.json").write_text(DEEP)
    (root / "workloads" / "toy" / "deep.jsonl").write_text(DEEP + "\n")
    result = invoke("check-inputs", "--data-root", str(root))
    refused(result, "deep.json", "deep.jsonl", "nested too deeply", code=1)


@pytest.mark.parametrize("content", [DEEP.encode(), b"\x89PNG\r\n\x1a\n\x00\xff\xfe"])
def test_reproduce_refuses_a_deep_or_binary_file(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(content + b"\n")
    result = invoke("reproduce", f"{path}:1")
    refused(result, str(path))


@pytest.mark.parametrize("content", [DEEP.encode(), b"\x89PNG\r\n\x1a\n\x00\xff\xfe"])
def test_diff_env_refuses_a_deep_or_binary_lock(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    path.write_bytes(content)
    result = invoke("diff-env", str(path), "torch-cpu", "--locks-dir", str(REPO / "locks"))
    refused(result, str(path))


# ---------------------------------------------------------------- locks that cannot be read


@pytest.fixture
def broken_locks(tmp_path: Path) -> Path:
    spec = (REPO / "locks" / "torch-cpu" / "env.toml").read_bytes()
    broken = {
        "no-lock": {"env.toml": spec},
        "binary-lock": {"env.toml": spec, "lock.json": b"\x89\xff\x00"},
        "bad-lock": {"env.toml": spec, "lock.json": b"{"},
        "deep-lock": {"env.toml": spec, "lock.json": DEEP.encode()},
        "binary-toml": {"env.toml": b"\xff\xfe\x00toml"},
        "bad-toml": {"env.toml": b"python = ["},
        "deep-toml": {"env.toml": b"a = " + b"[" * 100_000},
    }
    for env, files in broken.items():
        (tmp_path / "locks" / env).mkdir(parents=True)
        for name, data in files.items():
            (tmp_path / "locks" / env / name).write_bytes(data)
    return tmp_path / "locks"


ENVS = ["no-lock", "binary-lock", "bad-lock", "deep-lock", "binary-toml", "bad-toml", "deep-toml"]


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("command", ["fetch", "verify-env", "build"])
def test_a_lock_that_cannot_be_read_is_exit_2(
    command: str, env: str, broken_locks: Path, tmp_path: Path
) -> None:
    argv = {
        "fetch": ["fetch", env, "--offline", "--store", str(tmp_path / "store")],
        "verify-env": ["verify-env", env, "--store", str(tmp_path / "store")],
        "build": ["build", "--env", env, "--dry-run"],
    }[command]
    result = invoke(*argv, "--locks-dir", str(broken_locks))
    refused(result, str(broken_locks / env))


def test_upstreams_exit_2_on_a_lock_that_cannot_be_read(broken_locks: Path, tmp_path: Path) -> None:
    result = invoke(
        "upstreams", "--offline", "--locks-dir", str(broken_locks), "--out",
        str(tmp_path / "up.json"),
    )  # fmt: skip
    refused(result, str(broken_locks))


# ---------------------------------------------------------------- the empty path


@pytest.mark.parametrize(
    "argv",
    [
        ["merge", "{results}", "--out", ""],
        ["audit", "--runtime", "host", "--device", "cpu", "--out", ""],
        ["export-solutions", "--out", ""],
        ["run", "--solution", "correct", "--report", ""],
        ["reproduce", "{results}:1", "--out", ""],
        ["upstreams", "--offline", "--out", ""],
        ["check-inputs", "--data-root", ""],
    ],
    ids=lambda argv: argv[0],
)
def test_the_empty_path_is_refused(argv: list[str], tmp_path: Path) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text("{}\n")
    filled = [
        str(results) if a == "{results}" else a.replace("{results}", str(results)) for a in argv
    ]
    result = invoke(*filled, cwd=tmp_path)
    refused(result, "empty path")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


# ---------------------------------------------------------------- sources out of their folder


def test_a_source_that_links_out_of_its_folder_is_refused(places: dict[str, Path]) -> None:
    folder = places["solutions"] / "correct"
    outside = places["base"] / "main.py"
    (folder / "main.py").rename(outside)
    (folder / "main.py").symlink_to(outside)
    argv = run_args(places, "--solution", "correct", "--validation-only")
    result = invoke(*argv, "--report", str(places["base"] / "r.jsonl"))
    refused(result, str(folder / "solution.json"), "symbolic link out of")
    assert not (places["base"] / "r.jsonl").exists()
