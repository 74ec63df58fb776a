"""Lock models: historical pins of a source, and a name locked once per role (runtime and the
CUDA toolchain) with every reader keying by (role, name)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from envaudit.lock.fetch import _wanted
from envaudit.lock.files import load_lock
from envaudit.lock.verify import locked_distributions
from envaudit.schema.locks import (
    EnvSpec,
    HistoricalPin,
    Lock,
    LockedSource,
    SourceSpec,
    seal,
)
from tests.conftest import REPO

STAND_IN = "9241ae3ef9bac614dd25e45e507e089f888280e0"
CUTLASS = "147f5673d0c1c3dcf66f78d677fd647e4a020219"
AUDIT_CUTLASS = "4faf1a1568cf1e4ad8ff71846a13e16f2a6a6f6b"
HISTORICAL = {
    "rev": "0f11e178",
    "submodules": {"csrc/cutlass": AUDIT_CUTLASS},
    "note": "the audit's pins; in no readable snapshot",
}


def source(**extra: Any) -> dict[str, Any]:
    return {
        "name": "flash-mla",
        "git": "deepseek-ai/FlashMLA",
        "rev": STAND_IN,
        "submodules": {"csrc/cutlass": CUTLASS},
        **extra,
    }


def package(name: str, version: str, role: str, digit: str = "a") -> dict[str, Any]:
    artifact = {"filename": f"{name}-{version}-py3-none-any.whl", "size": 1, "sha256": digit * 64}
    return {
        "name": name,
        "version": version,
        "index": "default",
        "role": role,
        "artifact": artifact,
    }


def lock_body(packages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {
        "env": "toy",
        "spec_sha256": "0" * 64,
        "python": "3.12",
        "platform": "x86_64-manylinux_2_28",
        "base": {"recipe": "noble-minbase", "recipe_sha256": "1" * 64},
        "cuda": {"version": "13.3", "home": "/opt/cuda"},
        "packages": packages,
        "resolver": "uv test",
        **extra,
    }


def test_historical_pins_are_typed_and_reach_the_lock() -> None:
    spec = SourceSpec.model_validate(source(historical=HISTORICAL))
    assert spec.historical == HistoricalPin.model_validate(HISTORICAL)
    locked = LockedSource(
        name=spec.name,
        kind="git",
        rev=spec.rev,
        submodules=spec.submodules,
        historical=spec.historical,
    )
    sealed = seal(lock_body([], sources=[locked.model_dump(mode="json")]))
    dumped = sealed.model_dump(mode="json")["sources"][0]["historical"]
    assert dumped == HISTORICAL
    assert Lock.model_validate_json(json.dumps(sealed.model_dump(mode="json"))) == sealed
    said = sealed.sources[0].stand_in()
    assert said is not None
    assert "9241ae3ef9ba (csrc/cutlass 147f5673d0c1)" in said
    assert "historical pin 0f11e178 (csrc/cutlass 4faf1a1568cf)" in said
    assert "figures measured in this environment are for the stand-in" in said


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"historical": {**HISTORICAL, "rev": "not-hex"}}, "not a git commit"),
        ({"historical": {**HISTORICAL, "submodules": {"csrc/cutlass": "zz"}}}, "not a git commit"),
        ({"historical": {**HISTORICAL, "note": ""}}, "at least 1 character"),
        ({"historical": {**HISTORICAL, "rev": STAND_IN[:8]}}, "is the built rev itself"),
        ({"historical": {**HISTORICAL, "url": "https://example.org"}}, "Extra inputs"),
    ],
)
def test_historical_pins_are_refused_when_wrong(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        SourceSpec.model_validate(source(**extra))


def test_historical_pins_are_for_git_sources_only() -> None:
    with pytest.raises(ValidationError, match="git sources only"):
        SourceSpec.model_validate(
            {"name": "natten", "sdist": "natten==0.21.7", "historical": HISTORICAL}
        )


def test_unset_historical_leaves_spec_and_closure_hashes_as_they_were() -> None:
    """Locks made before the field existed keep their spec and closure hashes."""
    spec = SourceSpec.model_validate(source())
    assert "historical" not in spec.model_dump(mode="json")
    locked = LockedSource(name="x", kind="git", rev=STAND_IN)
    assert "historical" not in locked.model_dump(mode="json")
    for path in sorted((REPO / "locks").glob("*/lock.json")):
        load_lock(path.parent)  # refuses a closure hash that does not match the content


def test_a_name_is_locked_once_per_role() -> None:
    """The toolchain's nvidia-cuda-runtime (nvcc's release, for the headers) beside torch's."""
    body = lock_body(
        [
            package("nvidia-cuda-runtime", "13.0.96", "runtime", "a"),
            package("nvidia-cuda-runtime", "13.3.29", "cuda", "b"),
            package("torch", "2.11.0", "runtime", "c"),
        ]
    )
    lock = seal(body)
    assert [(p.name, p.version) for p in lock.runtime_packages()] == [
        ("nvidia-cuda-runtime", "13.0.96"),
        ("torch", "2.11.0"),
    ]
    assert [(p.name, p.version) for p in lock.toolchain_packages()] == [
        ("nvidia-cuda-runtime", "13.3.29")
    ]
    twice = [package("torch", "2.11.0", "runtime", "c"), package("torch", "2.11.0", "runtime", "d")]
    with pytest.raises(ValidationError, match="torch is locked twice with role runtime"):
        seal(lock_body(twice))
    with pytest.raises(ValidationError, match="need a cuda section"):
        seal(lock_body([package("nvidia-cuda-nvcc", "13.3.73", "cuda")], cuda=None))


def test_readers_key_the_duplicated_name_by_role() -> None:
    lock = seal(
        lock_body(
            [
                package("nvidia-cuda-runtime", "13.0.96", "runtime", "a"),
                package("nvidia-cuda-runtime", "13.3.29", "cuda", "b"),
            ]
        )
    )
    # verify-env: the run closure only (the toolchain lives in its own prefix)
    assert [(d.name, d.version) for d in locked_distributions(lock)] == [
        ("nvidia-cuda-runtime", "13.0.96")
    ]
    # fetch and the artifact list: both files, the toolchain's marked
    whats = [what for what, _, _ in _wanted(lock)]
    assert whats == [
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-runtime==13.3.29 (CUDA toolchain)",
    ]
    assert [what for what, _ in lock.artifacts()] == whats
    assert lock.cuda is not None and lock.cuda.prefix_subdir == "nvidia/cu13"


def test_cuda_components_name_each_package_once() -> None:
    raw = _cuda_spec(
        version="13.3",
        components=["nvidia-cuda-runtime==13.3.29", "nvidia_cuda_runtime==13.0.96"],
    )
    with pytest.raises(ValidationError, match="name nvidia-cuda-runtime more than once"):
        EnvSpec.model_validate(raw)


def _cuda_spec(**cuda: Any) -> dict[str, Any]:
    return {
        "python": "3.12",
        "platform": "x86_64-manylinux_2_28",
        "base": {"recipe": "noble-minbase"},
        "requirements": ["torch==2.11.0"],
        "cuda": {
            "version": "13.0",
            "home": "/opt/cuda",
            "components": ["nvidia-cuda-nvcc==13.0.88", "nvidia-cublas==13.1.0.3"],
            **cuda,
        },
    }


@pytest.mark.parametrize(
    ("cuda", "message"),
    [
        ({"build_only_components": ["nvidia-cufft"]}, "names nvidia-cufft, not among"),
        (
            {"build_only_components": ["nvidia-cublas"], "build_only": True},
            "whole toolchain is build-only already",
        ),
        (
            {"build_only_components": ["nvidia_cublas", "nvidia-cuda-nvcc"]},
            "names every component: write cuda.build_only = true",
        ),
    ],
)
def test_build_only_components_are_refused_when_wrong(cuda: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EnvSpec.model_validate(_cuda_spec(**cuda))


def test_build_only_components_leave_the_run_toolchain_and_old_hashes_alone() -> None:
    """Unset, the field is absent from spec and closure (every other lock keeps its hashes);
    set, the run-time toolchain drops those components, matched by normalized name."""
    plain = EnvSpec.model_validate(_cuda_spec())
    assert "build_only_components" not in json.dumps(plain.model_dump(mode="json"))
    body = lock_body(
        [
            package("nvidia-cuda-nvcc", "13.0.88", "cuda"),
            package("nvidia-cublas", "13.1.0.3", "cuda", "b"),
            package("nvidia-cublas", "13.1.0.3", "runtime", "b"),
        ]
    )
    body["cuda"] = {"version": "13.0", "home": "/opt/cuda"}
    before = seal(body)
    assert [p.name for p in before.run_toolchain_packages()] == [
        "nvidia-cuda-nvcc",
        "nvidia-cublas",
    ]
    body["cuda"]["build_only_components"] = ["nvidia-cublas"]
    after = seal(body)
    assert after.closure_hash != before.closure_hash
    assert [p.name for p in after.run_toolchain_packages()] == ["nvidia-cuda-nvcc"]
    assert len(after.toolchain_packages()) == 2
    body["cuda"] = {"version": "13.0", "home": "/opt/cuda", "build_only": True}
    assert seal(body).run_toolchain_packages() == []


def test_shipped_flashmla_locks_build_the_stand_in_and_record_the_audit_pins() -> None:
    for env, nvcc, runtime in (
        ("flashmla-13.1", "13.1.115", "13.1.80"),
        ("flashmla-13.3", "13.3.73", "13.3.29"),
    ):
        lock = load_lock(Path(REPO, "locks", env))
        (flash,) = lock.sources
        assert (flash.rev, flash.submodules, flash.rev_unresolved) == (
            STAND_IN,
            {"csrc/cutlass": CUTLASS},
            False,
        )
        assert flash.historical is not None
        assert (flash.historical.rev, flash.historical.submodules) == (
            "0f11e178",
            {"csrc/cutlass": AUDIT_CUTLASS},
        )
        assert flash.build_env["FLASH_MLA_DISABLE_SM100"] == "1"
        toolchain = {p.name: p.version for p in lock.toolchain_packages()}
        run = {p.name: p.version for p in lock.runtime_packages()}
        assert toolchain["nvidia-cuda-nvcc"] == toolchain["nvidia-nvvm"] == nvcc
        assert (
            toolchain["nvidia-cuda-runtime"] == runtime and run["nvidia-cuda-runtime"] == "13.0.96"
        )
        for headers in ("nvidia-cusparse", "nvidia-curand"):  # torch's versions
            assert toolchain[headers] == run[headers]
        assert "nvidia-cuda-nvcc" not in run
    spill = load_lock(Path(REPO, "locks", "flashmla-13.3")).sources[0].build_env
    assert spill["FLASH_MLA_SKIP_REG_SPILL_CHECK"] == "1"
