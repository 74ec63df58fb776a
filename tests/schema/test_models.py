"""Schema models: FlashInfer-Bench files round-trip unchanged; additions and unknown keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from envaudit.schema.jsonschema import render_schemas
from envaudit.schema.models import Definition, Solution, Trace, dump, unknown_keys
from tests.conftest import REPO, toy_definition

FIB_DEFINITION = {
    "name": "gemm_n128_k64",
    "op_type": "gemm",
    "tags": ["status:verified"],
    "description": "C = A @ B.T",
    "axes": {
        "M": {"type": "var", "description": "rows"},
        "N": {"type": "const", "value": 128},
        "K": {"type": "const", "value": 64},
    },
    "constraints": ["M >= 1"],
    "inputs": {
        "A": {"shape": ["M", "K"], "dtype": "float16"},
        "B": {"shape": ["N", "K"], "dtype": "float16"},
    },
    "outputs": {"C": {"shape": ["M", "N"], "dtype": "float16"}},
    "reference": "import torch\n\ndef run(A, B):\n    return A @ B.T\n",
}

FIB_TRACE = {
    "definition": "gemm_n128_k64",
    "workload": {
        "uuid": "a1",
        "axes": {"M": 7},
        "inputs": {
            "A": {"type": "random"},
            "B": {"type": "safetensors", "path": "blob/b.safetensors", "tensor_key": "B"},
        },
    },
    "solution": "s",
    "evaluation": {
        "status": "PASSED",
        "environment": {"hardware": "NVIDIA_H100", "libs": {"torch": "2.11"}},
        "timestamp": "2026-11-29T00:00:00",
        "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0},
        "performance": {"latency_ms": 0.1, "reference_latency_ms": 0.2, "speedup_factor": 2.0},
    },
}

FIB_SOLUTION = {
    "name": "gemm_triton",
    "definition": "gemm_n128_k64",
    "author": "someone",
    "spec": {
        "language": "triton",
        "target_hardware": ["NVIDIA_H100"],
        "entry_point": "main.py::run",
        "destination_passing_style": False,
    },
    "sources": [{"path": "main.py", "content": "def run(A, B):\n    return A @ B.T\n"}],
}


@pytest.mark.parametrize(
    ("model", "doc"),
    [(Definition, FIB_DEFINITION), (Trace, FIB_TRACE), (Solution, FIB_SOLUTION)],
)
def test_flashinfer_bench_documents_round_trip_unchanged(model: type, doc: dict) -> None:
    parsed = model.model_validate(doc)
    assert dump(parsed) == doc
    assert unknown_keys(parsed) == []


def test_extensions_are_typed_and_kept() -> None:
    d = Definition.model_validate(toy_definition())
    assert d.effective_tolerance.rule == "allclose"
    assert d.inputs["lengths"].init is not None
    assert dump(d) == toy_definition()
    assert Definition.model_validate(FIB_DEFINITION).effective_tolerance.atol == 1e-2


def test_unknown_keys_are_listed_with_their_path() -> None:
    doc = json.loads(json.dumps(FIB_DEFINITION))
    doc["owner"] = "x"
    doc["inputs"]["A"]["layout"] = "row"
    parsed = Definition.model_validate(doc)
    assert sorted(unknown_keys(parsed)) == ["inputs.A.layout", "owner"]
    assert dump(parsed)["inputs"]["A"]["layout"] == "row"


def test_reference_without_run_is_rejected() -> None:
    doc = dict(FIB_DEFINITION, reference="def other():\n    pass\n")
    with pytest.raises(ValidationError, match=r"no top-level function `run`"):
        Definition.model_validate(doc)


def test_committed_json_schemas_match_the_models() -> None:
    for name, text in render_schemas().items():
        committed = REPO / "docs" / "schema" / name
        assert committed.read_text() == text, f"{committed} is stale: run `make schemas`"


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("envaudit.schema.models", ["torch", "docker", "typer", "numpy"]),
        ("envaudit.schema.expressions", ["torch", "pydantic", "numpy"]),
        ("envaudit.harness.inputs", ["typer", "pydantic", "docker", "rich"]),
        ("envaudit.dataset.checks", ["torch", "typer"]),
        # what `envaudit run` imports before planning: no Docker SDK, no pydantic line models
        ("envaudit.console", ["docker", "envaudit.schema.result_line"]),
        ("envaudit.commands.run", ["docker"]),
    ],
)
def test_layers_import_only_what_they_may(module: str, forbidden: list[str]) -> None:
    code = f"import sys, {module}; print(','.join(m for m in {forbidden!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(REPO)
    )
    assert out.stdout.strip() == "", f"{module} imported {out.stdout.strip()}"


@pytest.mark.parametrize(
    "git",
    ["https://github.com/deepseek-ai/FlashMLA.git", "git@github.com:deepseek-ai/FlashMLA.git"],
)
def test_git_source_names_a_repository_not_a_url(git: str) -> None:
    from envaudit.schema.locks import SourceSpec

    with pytest.raises(ValueError, match="is not a repository name"):
        SourceSpec(name="flash-mla", git=git, rev="a" * 40)
    assert SourceSpec(name="flash-mla", git="deepseek-ai/FlashMLA", rev="a" * 40).git
