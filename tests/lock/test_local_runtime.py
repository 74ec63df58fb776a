"""`envaudit run --runtime local`: the baselines' smoke suites in an environment built only from
the torch-cpu lock and the store (fetched here from the index and the local find-links)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.files import load_lock
from envaudit.schema.results import read_lines
from tests.conftest import REPO, SHIPPED_ROOT
from tests.harness.test_baselines_cpu import REPRESENTATIVE_BASELINES, SOLUTIONS, baselines

LOCK = load_lock(REPO / "locks" / "torch-cpu")
LOCAL_TORCH = [
    Path(p) / a.filename
    for p in (os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS") or "").split()
    for a in [next(x.artifact for x in LOCK.packages if x.name == "torch")]
]
pytestmark = pytest.mark.skipif(
    not any(p.is_file() for p in LOCAL_TORCH),
    reason="the torch-cpu lock's CPU torch wheel is not in any configured find-links folder",
)


@pytest.fixture(scope="module")
def local_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    base = tmp_path_factory.mktemp("local")
    variables = {"ENVAUDIT_STORE": str(base / "store"), "ENVAUDIT_CACHE": str(base / "cache")}
    result = CliRunner().invoke(
        app, ["fetch", "torch-cpu", "--locks-dir", str(REPO / "locks")], env=variables
    )
    assert result.exit_code == 0, result.output
    yield variables
    shutil.rmtree(base, ignore_errors=True)  # the store and the built env: 1.2 GB


# What is under test here is the environment the local runtime builds from the lock and the
# store alone, the same for every baseline: a few of different kinds are enough (every baseline's
# numerics run on the host in test_baselines_cpu).
@pytest.mark.parametrize("name", REPRESENTATIVE_BASELINES)
def test_baseline_passes_smoke_in_local_env(
    name: str, local_env: dict[str, str], tmp_path: Path
) -> None:
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", name, "--runtime", "local", "--env", "torch-cpu"]
    argv += ["--device", "cpu", "--suite", "smoke", "--data-root", str(SHIPPED_ROOT)]
    argv += ["--solutions-root", str(SOLUTIONS), "--report", str(report)]
    result = CliRunner().invoke(app, argv, env=local_env)
    lines = [line for _, line in read_lines(report) if line]
    assert lines, result.output
    assert all(line["status"] == "PASSED" for line in lines), [
        (x["message"], (x.get("log") or "")[-3000:]) for x in lines
    ]
    for line in lines:
        assert line["context"]["runtime"] == "local"
        assert line["context"]["closure_hash"] == LOCK.closure_hash
        assert line["context"]["declared_env"] == "torch-2.11-cu130"
        # only the lock's distributions are installed: the harness is on PYTHONPATH, not in it
        assert line["environment"]["distributions_count"] == len(LOCK.packages)
        assert line["environment"]["torch"] == "2.13.0+cpu"
    assert result.exit_code == 0


def test_audit_in_local_environments(local_env: dict[str, str], tmp_path: Path) -> None:
    """`audit --runtime local`: with --env every solution runs in that lock; without it each
    runs in the lock it declares, and one whose artifacts are not in the store is reported as
    an error (exit 1) while the others still run."""
    names = baselines()[:2]
    common = ["audit", "--runtime", "local", "--device", "cpu", "--data-root", str(SHIPPED_ROOT)]
    common += ["--solutions-root", str(SOLUTIONS)]
    for name in names:
        common += ["--solution", name]
    result = CliRunner().invoke(
        app, [*common, "--env", "torch-cpu", "--out", str(tmp_path / "a")], env=local_env
    )
    assert result.exit_code == 0, result.output
    lines = [line for _, line in read_lines(tmp_path / "a" / "results.jsonl") if line]
    assert {line["solution"] for line in lines} == set(names)
    assert {line["context"]["closure_hash"] for line in lines} == {LOCK.closure_hash}

    # the declared CUDA lock cannot be made here: no Python 3.12, or (offline) not in the store
    offline = {**local_env, "ENVAUDIT_OFFLINE": "1"}
    declared = CliRunner().invoke(app, [*common, "--out", str(tmp_path / "b")], env=offline)
    assert declared.exit_code == 1
    assert "torch-2.11-cu130" in declared.output
    assert "Python 3.12" in declared.output or "envaudit fetch" in declared.output
