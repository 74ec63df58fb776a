"""`envaudit bisect-env` end to end on the CPU: toy wheels built here, both ends locked by real
uv from a folder of them and the torch-cpu lock's files (no index), every step a real lock
resolved offline from the store and run through the local runtime.

The toy index: `toykernel` 1.0 scales right and 1.1 wrong; `toyaaa`, `toybbb` and `toyccc` (added)
change beside it and change nothing; `toypair-a` 2.0 requires `toypair-b==2.0`, whose factor is
wrong, so neither moves alone."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit import settings
from envaudit.cli import app
from envaudit.image.engine import Engine
from envaudit.lock.bisect_locks import toml_text
from envaudit.lock.bisect_search import search
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_lock
from envaudit.lock.files import load_lock, load_spec, write_lock
from envaudit.lock.resolve import lock_env
from envaudit.lock.store import Store
from envaudit.schema.locks import EnvSpec
from tests.conftest import (
    REPO,
    base_recipe_for,
    engine_missing,
    skip_unless_ready,
    slurm_missing,
    write_toy_root,
)
from tests.lock.helpers import PYTHON, env_header

TORCH_CPU = load_lock(REPO / "locks" / "torch-cpu")
TORCH_WHEEL = next(p.artifact for p in TORCH_CPU.packages if p.name == "torch")
FIND_LINKS = (os.environ.get("UV_FIND_LINKS") or os.environ.get("PIP_FIND_LINKS") or "").split()
pytestmark = pytest.mark.skipif(
    not any((Path(p) / TORCH_WHEEL.filename).is_file() for p in FIND_LINKS),
    reason="the torch-cpu lock's CPU torch wheel is not in any configured find-links folder",
)
BASES = REPO / "containers" / "bases"

SCALE = """
import torch

FACTOR = {factor}


def scale_rows(x, lengths, scale):
    mask = torch.arange(x.shape[1])[None, :] < lengths.long()[:, None]
    return torch.where(mask[..., None], x * scale * FACTOR, torch.zeros((), dtype=x.dtype))
"""
PAIR_A = """
import torch
import toypair_b


def scale_rows(x, lengths, scale):
    mask = torch.arange(x.shape[1])[None, :] < lengths.long()[:, None]
    factor = scale * toypair_b.FACTOR
    return torch.where(mask[..., None], x * factor, torch.zeros((), dtype=x.dtype))
"""
WHEELS = {
    ("toykernel", "1.0"): (SCALE.format(factor=1.0), ["toyaaa>=1.0", "toybbb>=1.0"]),
    ("toykernel", "1.1"): (SCALE.format(factor=1.5), ["toyaaa>=1.0", "toybbb>=1.0"]),
    ("toyaaa", "1.0"): ("", []),
    ("toyaaa", "2.0"): ("", []),
    ("toybbb", "1.0"): ("", []),
    ("toybbb", "1.1"): ("", ["toyccc>=1.0"]),
    ("toyccc", "1.0"): ("", []),
    ("toypair-a", "1.0"): (PAIR_A, ["toypair-b==1.0"]),
    ("toypair-a", "2.0"): (PAIR_A, ["toypair-b==2.0"]),
    ("toypair-b", "1.0"): ("FACTOR = 1.0\n", []),
    ("toypair-b", "2.0"): ("FACTOR = 1.5\n", []),
    ("toyzzz", "1.0"): ("", []),
    ("toyzzz", "2.0"): ("", []),
}
BASE_PINS = ["torch==2.13.0+cpu", "safetensors==0.8.0", "numpy==2.3.5"]
ENDS = {  # env -> (its own requirements, constraints on what they pull in)
    "good": (["toykernel==1.0"], ["toyaaa==1.0", "toybbb==1.0"]),
    "bad": (["toykernel==1.1"], ["toyaaa==2.0", "toybbb==1.1", "toyccc==1.0"]),
    "quiet": (["toykernel==1.0"], ["toyaaa==2.0", "toybbb==1.1", "toyccc==1.0"]),
    "pair-good": (["toypair-a==1.0", "toypair-b==1.0", "toyzzz==1.0"], []),
    "pair-bad": (["toypair-a==2.0", "toypair-b==2.0", "toyzzz==2.0"], []),
}


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(folder: Path, name: str, version: str, code: str, requires: list[str]) -> Path:
    """A pure-Python wheel of one module (`name` with '_' for '-'), as a build backend makes."""
    module, dist = name.replace("-", "_"), name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{module}/__init__.py": code.encode(),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for name_in, data in files.items():
            wheel.writestr(zipfile.ZipInfo(name_in, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return path


def write_solution(root: Path, name: str, module: str) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "main.py").write_text(
        f"import {module}\n\n\ndef run(x, lengths, scale):\n"
        f"    return {module}.scale_rows(x, lengths, scale)\n"
    )
    spec = {"language": "python", "target_hardware": ["cpu"], "entry_point": "main.py::run"}
    solution = {
        "name": name,
        "definition": "toy_scale",
        "author": "tests",
        "spec": {**spec, "destination_passing_style": False},
        "sources": [{"path": "main.py"}],
        "env": "good",
    }
    (folder / "solution.json").write_text(json.dumps(solution))


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Store, cache, toy wheels, the five end locks, a toy dataset and two solutions; and a uv
    cache of the module's own. uv keeps a wheel it unpacked by the wheel's path, and every
    test here installs from this one store, so one unpacked torch serves all their envs; in
    the session's cache, cleared after any test that leaves it above 1 GB (conftest.py), the
    first test's 2.4 GB were cleared (17-30 s) and the next three tests unpacked torch again
    (12 s each). The module's folder, this cache with it, goes when the module ends."""
    base = tmp_path_factory.mktemp("bisect")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)  # the runtimes read containers/bases from the working folder
        patch.setenv("UV_CACHE_DIR", str(base / "uv-cache"))  # Slurm's tasks inherit it too
        store = Store(base / "store")
        torch_config = FetchConfig.from_environment(store=store.root)
        assert fetch_lock(TORCH_CPU, torch_config).complete
        wheels = base / "wheels"
        wheels.mkdir()
        for (name, version), (code, requires) in WHEELS.items():
            build_wheel(wheels, name, version, code, requires)
        house = store.wheelhouse([p.artifact for p in TORCH_CPU.packages], base / "house")
        config = FetchConfig(store=store.root, find_links=[house, wheels], no_index=True)
        for env, (pins, constraints) in ENDS.items():
            folder = base / "locks" / env
            folder.mkdir(parents=True)
            (folder / "env.toml").write_text(
                env_header()
                + f"requirements = {json.dumps([*BASE_PINS, *pins])}\n"
                + f"constraints = {json.dumps(constraints)}\n"
                + 'find_links_only = ["torch"]\n'
            )
            lock = lock_env(folder, config, BASES)
            write_lock(folder, lock)
            offline = FetchConfig(store=store.root, find_links=[wheels], offline=True)
            assert fetch_lock(lock, offline).complete
        write_toy_root(base / "data")
        write_solution(base / "solutions", "toy-kernel", "toykernel")
        write_solution(base / "solutions", "toy-pair", "toypair_a")
        yield base
    shutil.rmtree(base, ignore_errors=True)  # a store of the torch-cpu lock: 1.4 GB


def bisect(
    places: Path, a: str, b: str, solution: str, out: str, *extra: str, cache: str = "cache"
) -> tuple[int, str, dict]:
    """`bisect-env` with the places' store; `cache` names the step cache (another name: nothing
    cached), `extra` the runtime or executor."""
    argv = ["bisect-env", a, b, "--solution", solution, "--device", "cpu", "--suite", "smoke"]
    argv += ["--measure-ms", "20", "--locks-dir", str(places / "locks")]
    argv += ["--data-root", str(places / "data"), "--solutions-root", str(places / "solutions")]
    argv += ["--out", str(places / out), *extra]
    variables = {
        "ENVAUDIT_STORE": str(places / "store"),
        "ENVAUDIT_CACHE": str(places / cache),
        "ENVAUDIT_OFFLINE": "1",
    }
    result = CliRunner().invoke(app, argv, env=variables)
    record = places / out / "bisect.json"
    found = json.loads(record.read_text()) if record.is_file() else {}
    return result.exit_code, result.output, found


def test_bisect_names_the_kernel_package_then_serves_a_rerun_from_the_cache(
    places: Path,
) -> None:
    code, out, found = bisect(places, "good", "bad", "toy-kernel", "first")
    assert code == 0, out
    assert "found: toykernel 1.0 -> 1.1 flips the status" in out
    changes = [c["key"] for c in found["changes"]]
    assert sorted(changes) == ["toyaaa", "toybbb", "toyccc", "toykernel"]
    steps = [s for s in found["steps"] if s["step"] not in ("A", "B")]
    assert 1 <= len(steps) <= math.ceil(math.log2(len(changes))) + 1
    by_step = {s["step"]: s for s in found["steps"]}
    assert set(by_step["A"]["statuses"].values()) == {"PASSED"}
    assert "PASSED" not in set(by_step["B"]["statuses"].values())
    for step in steps:  # like B exactly when it holds the kernel's change
        assert (step["like"] == "B") == ("toykernel" in step["applied"]), step
        lock = load_lock(places / "cache" / "bisect" / _work(found) / "locks" / step["env"])
        assert lock.closure_hash == step["closure_hash"]
        assert {p.name: p.version for p in lock.packages}["toykernel"] == (
            "1.1" if "toykernel" in step["applied"] else "1.0"
        )
    assert all(not s["cached"] for s in found["steps"])
    lines = (places / "first" / "results.jsonl").read_text().splitlines()
    assert len(lines) == len({s["closure_hash"] for s in found["steps"]})

    again_code, again_out, again = bisect(places, "good", "bad", "toy-kernel", "second")
    assert again_code == 0, again_out
    assert all(s["cached"] for s in again["steps"])
    assert [s["closure_hash"] for s in again["steps"]] == [
        s["closure_hash"] for s in found["steps"]
    ]
    assert "bisect-env: running" not in again_out


def _work(found: dict) -> str:
    return f"{found['a']['closure_hash'][:16]}-{found['b']['closure_hash'][:16]}"


def test_packages_that_must_move_together_are_named_as_one_group(places: Path) -> None:
    code, out, found = bisect(places, "pair-good", "pair-bad", "toy-pair", "pair")
    assert code == 0, out
    assert (
        "found: toypair-a 1.0 -> 2.0 together with toypair-b 1.0 -> 2.0"
        " (toypair-a 2.0 requires toypair-b==2.0) flips the status"
    ) in out
    assert found["group"] == ["toypair-a", "toypair-b"]
    for step in found["steps"]:  # no step ever held toypair-a without toypair-b
        assert ("toypair-a" in step["applied"]) == ("toypair-b" in step["applied"]), step


def test_ends_that_agree_cannot_be_bisected(places: Path) -> None:
    code, out, found = bisect(places, "good", "quiet", "toy-kernel", "agree")
    assert code == 2, out
    good, quiet = load_lock(places / "locks" / "good"), load_lock(places / "locks" / "quiet")
    assert "the ends agree on status" in out
    assert f"good (closure {good.closure_hash}) gives 1 PASSED" in out
    assert f"quiet (closure {quiet.closure_hash}) gives 1 PASSED" in out
    assert not found


def test_one_closure_and_unknown_locks_are_usage_errors(places: Path) -> None:
    code, out, _ = bisect(places, "good", "good", "toy-kernel", "same")
    assert code == 2 and "are one closure: nothing to bisect" in out
    code, out, _ = bisect(places, "good", "nowhere", "toy-kernel", "none")
    assert code == 2 and "'nowhere' is no lock.json file" in out


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7, 16, 33])
def test_one_culprit_is_found_in_ceil_log2_plus_one_steps(count: int) -> None:
    for culprit in range(count):
        result = search(count, lambda sets, c=culprit: [c in s for s in sets])
        assert result.culprits == (culprit,)
        assert len(result.judged) <= math.ceil(math.log2(count)) + 1
        for width in (2, 3):  # a Slurm level judges several points at once
            assert search(count, lambda sets, c=culprit: [c in s for s in sets], width).culprits


def test_a_flip_that_needs_two_changes_names_both() -> None:
    for first, second in [(0, 1), (0, 5), (2, 6), (6, 7)]:
        judge = lambda sets, a=first, b=second: [a in s and b in s for s in sets]  # noqa: E731
        assert search(8, judge).culprits == (first, second)


def test_env_toml_of_every_shipped_lock_reads_back_the_same() -> None:
    import tomllib

    for folder in sorted((REPO / "locks").glob("*/")):
        spec = load_spec(folder)
        again = EnvSpec.model_validate(tomllib.loads(toml_text(spec.model_dump(mode="json"))))
        assert again.canonical_sha256() == spec.canonical_sha256(), folder.name


def test_a_culprit_s_partner_that_flips_alone_is_the_answer() -> None:
    """flashinfer-python's new version brings einops; a solution that imports einops flips
    with einops alone, so the answer narrows to it. A partner that does not flip without the
    culprit leaves the culprit's group as it was (docs/bisect.md's real bisect)."""
    from envaudit.commands.bisect import narrowed
    from envaudit.lock.bisect import Folded

    keys = ["kernel", "helper", "einops", "other"]
    needs = {"kernel": {"helper", "einops"}}

    def folder(asked: list[str] | tuple[str, ...]) -> Folded:
        applied = set(asked)
        for name in asked:
            applied |= needs.get(name, set())
        return Folded(frozenset(applied))

    def judge_by(flip: str) -> object:
        def judge(sets: list[frozenset[str]]) -> list[bool]:
            return [flip in folder(sorted(s)).applied for s in sets]

        return judge

    assert narrowed(("kernel",), keys, folder, judge_by("einops")) == ("einops",)
    assert narrowed(("kernel",), keys, folder, judge_by("kernel")) == ("kernel",)
    assert narrowed(("other",), keys, folder, judge_by("other")) == ("other",)


@skip_unless_ready(slurm_missing(), settings.REQUIRE_SLURM)
def test_under_slurm_each_level_is_one_job_array_with_the_same_answer(places: Path) -> None:
    """Steps of one level at once (--parallel 2), each an `envaudit run` task of a job array on
    the real Slurm; a cache of its own, so every step runs there."""
    code, out, found = bisect(
        places,
        "good",
        "bad",
        "toy-kernel",
        "slurm",
        "--executor",
        "slurm",
        "--parallel",
        "2",
        cache="cache-slurm",
    )
    assert code == 0, out
    assert "found: toykernel 1.0 -> 1.1 flips the status" in out
    assert "bisect-env: running" not in out  # nothing ran in this process
    assert not any(s["cached"] for s in found["steps"])
    arrays = sorted((places / "cache-slurm" / "bisect" / _work(found) / "slurm").iterdir())
    assert len(arrays) >= 2, arrays  # the ends, then at least one level
    assert all(list(a.glob("task-*.out")) for a in arrays), arrays
    for step in found["steps"]:
        assert set(step["statuses"].values()) == (
            {"PASSED"} if step["like"] == "A" else {"INCORRECT_NUMERICAL"}
        ), step


@skip_unless_ready(engine_missing(), settings.REQUIRE_ENGINE)
def test_in_containers_every_step_is_an_image_of_its_lock(places: Path) -> None:
    """The pair under the docker runtime: the ends and the one step are each built as the image
    of their lock (the torch layer shared) and run there, with the local runtime's answer."""
    env = {"ENVAUDIT_STORE": str(places / "store"), "ENVAUDIT_CACHE": str(places / "cache-docker")}
    recipe = base_recipe_for(PYTHON)
    result = CliRunner().invoke(app, ["base", "build", recipe], env=env)
    assert result.exit_code == 0, result.output
    code, out, found = bisect(
        places,
        "pair-good",
        "pair-bad",
        "toy-pair",
        "docker",
        "--runtime",
        "docker",
        cache="cache-docker",
    )
    assert code == 0, out
    assert "found: toypair-a 1.0 -> 2.0 together with toypair-b 1.0 -> 2.0" in out
    engine = Engine.connect()
    for step in found["steps"]:
        lines = [json.loads(x) for x in Path(step["report"]).read_text().splitlines()]
        assert lines and all(x["context"]["runtime"] == "docker" for x in lines), step
        image = engine.image(lines[0]["context"]["image_id"])
        assert image is not None
        assert image.labels["dev.envaudit.closure-hash"] == step["closure_hash"]


def test_a_step_s_time_ratio_is_the_report_s_comparison_rule() -> None:
    """bisect-env --on time divides what the report divides: each line's graph figure where
    it has one, with the run-to-run floor of its kind, and the geometric mean over the
    workloads both timed (report/intervals.py), not eager medians alone."""
    from envaudit.commands.bisect import time_ratio
    from envaudit.report.intervals import geomean_of, speedup_of
    from envaudit.schema.result_line import ResultLine
    from tests.report.test_merge import line

    a = [ResultLine.model_validate(line("s", w, 10.0)) for w in ("w1", "w2")]
    b = [ResultLine.model_validate(line("s", w, 12.0)) for w in ("w1", "w2", "w3")]
    ratio, bounds = time_ratio(a, b)
    pairs = [speedup_of(x, y) for x, y in zip(b[:2], a, strict=True)]
    expected = geomean_of([pair.inverse() for pair in pairs if pair is not None])
    assert expected is not None and expected.ci95 is not None
    assert ratio is not None and math.isclose(ratio, 1.2)  # graph 10.8 / 9.0: w3 has no A line
    assert bounds == (expected.ci95[0], expected.ci95[1])
    assert bounds[0] > 1.0  # beyond the floor: a step like B at --threshold 0
