"""Shared fixtures: a small hand-made TraceSet root that tests can break one way at a time."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from envaudit import settings


def pytest_configure(config: pytest.Config) -> None:
    """uv's cache for this session only, unless the caller names one: the suite installs
    wheels from stores in temporary folders, and uv keeps every such install's unpacked files
    (about 8 GB a run) in its cache under paths no later run asks for again."""
    if "UV_CACHE_DIR" in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="envaudit-tests-uv-")
    os.environ["UV_CACHE_DIR"] = folder
    config.stash[_UV_CACHE] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_UV_CACHE, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


_UV_CACHE = pytest.StashKey[str]()
UV_CACHE_LIMIT_BYTES = 1 << 30
"""The most the session's own uv cache may hold after a test: the wheels it unpacks from the
tests' temporary stores (torch at 700 MB each) reached 6.4 GB in one run, 5.6 GB within two
modules, on a disk that CI shares with others (a run has failed on a full disk)."""
_UV_ARCHIVES = pytest.StashKey[dict[str, int]]()


@pytest.fixture(autouse=True)
def _uv_cache_bounded(request: pytest.FixtureRequest) -> Iterator[None]:
    """Clears the session's uv cache after a test that left it above the limit (uv's own
    `cache clean`; nothing else uses that cache between two tests); a caller's cache is left
    alone. Each unpacked wheel is measured once, when it first appears."""
    yield
    folder = request.config.stash.get(_UV_CACHE, None)
    if folder is None:
        return
    sizes = request.config.stash.setdefault(_UV_ARCHIVES, {})
    archives = Path(folder) / "archive-v0"
    names = {entry.name for entry in os.scandir(archives)} if archives.is_dir() else set()
    for name in names - sizes.keys():
        sizes[name] = _folder_bytes(archives / name)
    if sum(sizes[name] for name in names) <= UV_CACHE_LIMIT_BYTES:
        return
    try:
        subprocess.run(["uv", "cache", "clean", "--cache-dir", folder], capture_output=True)
    except OSError:  # no uv on PATH: the folder is the session's alone
        shutil.rmtree(folder, ignore_errors=True)
    sizes.clear()


def _folder_bytes(folder: Path) -> int:
    """Bytes the files under `folder` take on disk."""
    total = 0
    for path in folder.rglob("*"):
        with contextlib.suppress(OSError):
            total += path.lstat().st_blocks * 512
    return total


REPO = Path(__file__).resolve().parents[1]


def source_lines_matching(pattern: re.Pattern[str], but: str) -> list[str]:
    """`path:line: text` of every line of src/ that `pattern` finds, outside the files named
    `but` (the one place the thing searched for belongs)."""
    return [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sorted((REPO / "src").rglob("*.py"))
        if path.name != but
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]


SHIPPED_ROOT = REPO / "workloads"

REFERENCE = '''import torch


def run(x, lengths, scale):
    """Scale the first lengths[b] rows of each batch element."""
    out = torch.zeros_like(x)
    for b in range(x.shape[0]):
        out[b, : int(lengths[b])] = x[b, : int(lengths[b])] * scale
    return out
'''

UUID_BLOB = "00000000-0000-4000-8000-000000000001"
UUID_RANDOM = "00000000-0000-4000-8000-000000000002"
BLOB_REL = f"blob/workloads/toy/toy_scale/toy_scale_{UUID_BLOB}.safetensors"


def toy_definition() -> dict[str, object]:
    return {
        "name": "toy_scale",
        "op_type": "toy",
        "description": "Scale the valid rows of x.",
        "axes": {"B": {"type": "var"}, "S": {"type": "var"}, "D": {"type": "const", "value": 4}},
        "inputs": {
            "x": {"shape": ["B", "S", "D"], "dtype": "float32"},
            "lengths": {
                "shape": ["B"],
                "dtype": "int32",
                "init": {"dist": "randint", "low": 0, "high": 3},
            },
            "scale": {"shape": None, "dtype": "float32"},
        },
        "outputs": {"out": {"shape": ["B", "S", "D"], "dtype": "float32"}},
        "constraints": ["(lengths <= S).all()", "(lengths >= 0).all()", "scale > 0"],
        "reference": REFERENCE,
        "tolerance": {"atol": 1e-5, "rtol": 1e-5, "rule": "allclose"},
        "flops": "B * S * D",
        "bytes": "2 * 4 * B * S * D",
    }


def _trace(uuid: str, axes: dict[str, int], inputs: dict[str, object]) -> str:
    workload = {"uuid": uuid, "axes": axes, "inputs": inputs, "seed": 7}
    trace = {"definition": "toy_scale", "workload": workload, "solution": None, "evaluation": None}
    return json.dumps(trace)


def write_toy_root(root: Path) -> Path:
    """A valid root: one definition, one workload with a blob, one with random inputs."""
    (root / "definitions/toy").mkdir(parents=True)
    (root / "definitions/toy/toy_scale.json").write_text(json.dumps(toy_definition(), indent=2))
    blob = root / BLOB_REL
    blob.parent.mkdir(parents=True)
    save_file({"lengths": np.array([2, 0, 3], dtype=np.int32)}, str(blob))
    blob.chmod(0o644)  # safetensors writes 0600; a container's non-root worker must read it
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    blob_input = {
        "type": "safetensors",
        "path": BLOB_REL,
        "tensor_key": "lengths",
        "sha256": digest,
        "provenance": "Hand-written for the tests.",
    }
    lines = [
        _trace(
            UUID_BLOB,
            {"B": 3, "S": 3},
            {
                "x": {"type": "random"},
                "lengths": blob_input,
                "scale": {"type": "scalar", "value": 2.0},
            },
        ),
        _trace(
            UUID_RANDOM,
            {"B": 2, "S": 5},
            {
                "x": {"type": "random"},
                "lengths": {"type": "random"},
                "scale": {"type": "scalar", "value": 0.5},
            },
        ),
    ]
    (root / "workloads/toy").mkdir(parents=True)
    (root / "workloads/toy/toy_scale.jsonl").write_text("\n".join(lines) + "\n")
    (root / "suites").mkdir()
    suite = {"schema_version": 1, "name": "smoke", "workloads": {"toy_scale": [UUID_BLOB]}}
    (root / "suites/smoke.json").write_text(json.dumps(suite))
    return root


def tree_digest(root: Path) -> dict[str, str]:
    """Path -> sha256 of every file under root, to prove a command wrote nothing."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def toy_root(tmp_path: Path) -> Path:
    return write_toy_root(tmp_path / "root")


def base_recipe_for(python: str) -> str:
    """The shipped base recipe whose Python is `python` (locks refuse a mismatch)."""
    import tomllib

    for path in sorted((REPO / "containers" / "bases").glob("*.toml")):
        if str(tomllib.loads(path.read_text()).get("python")) == python:
            return path.stem
    pytest.skip(f"no shipped base recipe provides Python {python}", allow_module_level=True)


@pytest.fixture(scope="session")
def native_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ENVAUDIT_CACHE for the tests that compile the C++ toy solution
    (tests/harness/test_native.py's source): the suite compiles it once, later runs load it."""
    return tmp_path_factory.mktemp("native-cache")


def skip_unless_ready(reason: str | None, required: settings.Setting[bool]) -> pytest.MarkDecorator:
    """skipif(`reason`) where this machine lacks what the tests need (an engine, podman, a
    registry); where `required` (one of settings.py's REQUIRE switches, which CI sets) says
    they must run, the module fails at collection instead, naming what is missing."""
    if reason and settings.value(required):
        raise RuntimeError(f"{required.name}=1 but {reason}")
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def engine_missing() -> str | None:
    """Why no container engine answers here (None: one does)."""
    from envaudit.image.engine import Engine, EngineError

    try:
        Engine.connect()
    except EngineError as exc:
        return f"no container engine: {exc}"
    return None


def slurm_missing() -> str | None:
    """Why no Slurm answers here (None: one does; scripts/slurm/single-node.sh starts one)."""
    import shutil
    import subprocess

    if shutil.which("squeue") is None:
        return "no Slurm here (scripts/slurm/single-node.sh starts one)"
    if subprocess.run(["squeue", "-h"], capture_output=True).returncode != 0:
        return "Slurm does not answer (scripts/slurm/single-node.sh starts one)"
    return None
