"""The sample dataset under workloads/: clean, complete, small, reproducible, and every
reference runs on the CPU on its smoke workloads."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest
import torch

from envaudit.dataset.checks import check_inputs
from envaudit.dataset.traceset import TraceSet, load_traceset
from envaudit.harness.inputs import (
    axis_values,
    check_constraints,
    concrete_shape,
    materialize_inputs,
    run_reference,
    torch_dtype,
)
from scripts.sample_dataset.build import main as build_dataset
from tests.conftest import SHIPPED_ROOT, tree_digest

# Every family of the audit's table, and how its definitions are named here.
FAMILIES = {
    "dense attention": "dense_attention_",
    "cached-prefix attention": "cached_prefix_attention_",
    "prefix-zero block-causal attention": "prefix_zero_block_causal_attention_",
    "audio attention": "audio_attention_",
    "neighborhood attention": "neighborhood_attention_",
    "GDN decode": "gdn_decode_qk4_v8_d128_k_last",
    "GDN prefill": "gdn_prefill_qk4_v8_d128_k_last",
    "QSA index top-k": "qsa_index_",
    "MoE router": "moe_router_",
    "sparse GQA decode": "sparse_gqa_decode_",
    "sparse MLA decode": "mla_sparse_decode_",
    "sparse MLA prefill": "mla_sparse_prefill_",
    "mixed MLA": "mla_mixed_decode_",
    "dense BF16 GEMM": "gemm_bf16_",
    "grouped GEMM": "grouped_gemm_",
}
BLOB_BUDGET_BYTES = 20 * 1024 * 1024


@cache
def shipped() -> TraceSet:
    return load_traceset(SHIPPED_ROOT)


def test_check_inputs_is_clean_with_counts() -> None:
    report = check_inputs(SHIPPED_ROOT)
    assert report.findings == [], "\n".join(f.render() for f in report.findings)
    assert report.definitions == 21
    assert report.workloads == len(shipped().workloads) >= 63
    assert report.tensor_paths > 0 and report.unique_blobs > 0
    assert report.constraints_checked > 100


def test_every_family_is_covered() -> None:
    names = list(shipped().definitions)
    for family, prefix in FAMILIES.items():
        assert any(n.startswith(prefix) for n in names), f"no definition for {family}"
    assert "gemm_bf16_n12288_k4096" in names
    assert sum(n.startswith("neighborhood_attention_") for n in names) == 4


def test_each_definition_has_smoke_and_dev_workloads() -> None:
    ts = shipped()
    smoke, dev = ts.suite_uuids("smoke"), ts.suite_uuids("dev")
    for name in ts.definitions:
        own = {w.uuid for w in ts.workloads_of(name)}
        assert len(own) >= 3, name
        assert own & smoke, f"{name} has no smoke workload"
        assert len(own & dev) >= 2, f"{name} has fewer than two dev workloads"
        definition = ts.definitions[name].definition
        assert definition.tolerance is not None and definition.constraints, name
        assert definition.flops and definition.bytes, name


def test_blobs_stay_small_and_carry_provenance() -> None:
    total = sum(p.stat().st_size for p in (SHIPPED_ROOT / "blob").rglob("*") if p.is_file())
    assert total < BLOB_BUDGET_BYTES
    for wl in shipped().workloads:
        for spec in wl.trace.workload.inputs.values():
            if spec.type == "safetensors":
                assert spec.sha256 and spec.provenance


def test_generator_reproduces_the_committed_dataset(tmp_path: Path) -> None:
    assert build_dataset(["build", str(tmp_path)]) == 0

    def generated(root: Path) -> dict[str, str]:  # interfaces/ is written by hand
        return {k: v for k, v in tree_digest(root).items() if not k.startswith("interfaces/")}

    assert generated(tmp_path) == generated(SHIPPED_ROOT), "run `make dataset` and commit"


def smoke_cases() -> list[tuple[str, str]]:
    ts = shipped()
    smoke = ts.suite_uuids("smoke")
    return [(w.trace.definition, w.uuid) for w in ts.workloads if w.uuid in smoke]


@pytest.mark.parametrize(("definition", "uuid"), smoke_cases())
def test_reference_runs_on_cpu_smoke(definition: str, uuid: str) -> None:
    ts = shipped()
    d = json.loads((SHIPPED_ROOT / ts.definitions[definition].path).read_text())
    w = next(wl.trace.workload for wl in ts.workloads if wl.uuid == uuid)
    workload = w.model_dump(mode="json")
    inputs = materialize_inputs(d, workload, SHIPPED_ROOT)
    assert check_constraints(d, workload, inputs) == []
    outputs = run_reference(d, inputs)
    axes = axis_values(d, workload)
    for out, (name, spec) in zip(outputs, d["outputs"].items(), strict=True):
        assert tuple(out.shape) == concrete_shape(spec, axes), name
        assert out.dtype == torch_dtype(spec["dtype"]), name
        if out.dtype.is_floating_point:
            assert torch.isfinite(out.float()).all(), name
