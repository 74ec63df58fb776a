"""Compile caches: every library's cache variable points into one folder per environment closure
under the cache root, never the home folder; the first job finds it cold, the next warm, with the
same status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.runtime.jit import (
    JIT_CACHE_SWITCHES,
    JIT_CACHE_VARIABLES,
    jit_environment,
    prepare_jit_cache,
)
from tests.conftest import write_toy_root
from tests.harness.test_faults import JIT_SOLUTION, write_solution


def test_every_variable_points_into_the_folder_and_state_follows_its_content(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "jit" / "env-0123"
    assert prepare_jit_cache(folder) == "cold"
    variables = jit_environment(str(folder))
    assert set(variables) == set(JIT_CACHE_VARIABLES) | set(JIT_CACHE_SWITCHES)
    folders = [variables[v] for v in JIT_CACHE_VARIABLES]
    assert all(Path(v).parent == folder and Path(v).is_dir() for v in folders)
    assert prepare_jit_cache(folder) == "cold"  # empty subfolders are not a cache
    (Path(variables["TRITON_CACHE_DIR"]) / "k.bin").write_text("x")
    assert prepare_jit_cache(folder) == "warm"


def test_a_cache_switch_the_lock_or_the_caller_sets_is_theirs(tmp_path: Path) -> None:
    declared = {"FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0"}
    assert "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED" not in jit_environment(str(tmp_path), declared)
    assert jit_environment(str(tmp_path), {})["FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"] == "1"


def test_host_runs_keep_the_callers_cache_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    env = {"ENVAUDIT_CACHE": str(cache), "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "0"}
    audit_twice(tmp_path, ["--runtime", "host"], env)
    (kernel,) = (cache / "jit").glob("torch-cpu-*/triton/kernel.bin")
    assert kernel.read_text().split()[1] == "0"


def audit_twice(base: Path, argv_tail: list[str], env: dict[str, str]) -> list[dict]:
    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    write_solution(solutions, "jit_cache", JIT_SOLUTION)
    lines = []
    for attempt in ("cold", "warm"):
        argv = ["run", "--solution", "jit_cache", "--device", "cpu", "--data-root", str(root)]
        argv += ["--solutions-root", str(solutions), *argv_tail]
        argv += ["--report", str(base / f"{attempt}.jsonl")]
        result = CliRunner().invoke(app, argv, env=env)
        assert result.exit_code == 0, result.output
        lines += [json.loads(x) for x in (base / f"{attempt}.jsonl").read_text().splitlines()]
    return lines


def check_cold_then_warm(lines: list[dict], cache: Path) -> None:
    half = len(lines) // 2
    assert half and all(x["status"] == "PASSED" for x in lines)
    assert [x["context"]["jit_cache"] for x in lines[:1] + lines[half:]] == ["cold"] + [
        "warm"
    ] * half
    kernels = list((cache / "jit").glob("torch-cpu-*/triton/kernel.bin"))
    assert len(kernels) == 1, kernels
    # FA4's own cache was turned on for the worker (JIT_CACHE_SWITCHES)
    assert kernels[0].read_text().split()[1] == "1"


def test_host_runs_cache_under_the_cache_root_cold_then_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    cache = tmp_path / "cache"
    lines = audit_twice(tmp_path, ["--runtime", "host"], {"ENVAUDIT_CACHE": str(cache)})
    check_cold_then_warm(lines, cache)
