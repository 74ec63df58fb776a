"""The `-sglang` solutions (SGLang 0.5.22's own calls, issue 55) on the CPU: each solution's
main.py runs with pure-torch stand-ins of the SGLang calls it imports (sglang_standins), so
its adapter (layouts, pools, page tables, cu_seqlens, conversions) and its call wiring are
judged against the definition's reference with the definition's own tolerance, as the
harness judges a GPU run; then the real CLI gives every one of them a clear
UNSUPPORTED_DEVICE on the CPU."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.dataset.traceset import TraceSet, load_traceset
from envaudit.harness.compare import compare_outputs, overall_status
from envaudit.harness.inputs import materialize_inputs, run_reference, torch_dtype
from envaudit.harness.solution import LoadedSolution, load_solution, source_files
from tests.conftest import REPO, SHIPPED_ROOT
from tests.solutions.sglang_standins import standing_in

SOLUTIONS = REPO / "solutions"
SGLANG = sorted(p.parent.name for p in SOLUTIONS.glob("*-sglang/solution.json"))
ATTRIBUTED = sorted(
    json.loads(p.read_text())["definition"]
    for p in (SHIPPED_ROOT / "interfaces").rglob("*.json")
    if json.loads(p.read_text())["library"] == "SGLang"
)
EXTRA_WORKLOADS = {  # beyond smoke: longer rows, more ties
    "moe_router_mm_sqrtsoftplus_e128_h4096_topk6": ["478c85bb-"],
}


@cache
def shipped() -> TraceSet:
    return load_traceset(SHIPPED_ROOT)


def definition_of(name: str) -> dict[str, Any]:
    ts = shipped()
    return json.loads((SHIPPED_ROOT / ts.definitions[name].path).read_text())


def cases() -> list[tuple[str, str]]:
    ts = shipped()
    smoke = ts.suite_uuids("smoke")
    found = []
    for solution in SGLANG:
        definition = json.loads((SOLUTIONS / solution / "solution.json").read_text())["definition"]
        extra = EXTRA_WORKLOADS.get(definition, [])
        for w in ts.workloads_of(definition):
            if w.uuid in smoke or any(w.uuid.startswith(e) for e in extra):
                found.append((solution, w.uuid))
    return found


def load(solution: str, tmp_path: Path) -> LoadedSolution:
    spec = json.loads((SOLUTIONS / solution / "solution.json").read_text())
    return load_solution(spec, source_files(spec, SOLUTIONS / solution), tmp_path)


def inputs_of(definition: dict[str, Any], uuid: str) -> dict[str, Any]:
    w = next(wl.trace.workload for wl in shipped().workloads if wl.uuid == uuid)
    return materialize_inputs(definition, w.model_dump(mode="json"), SHIPPED_ROOT)


def test_one_solution_per_call_the_interfaces_attribute_to_sglang() -> None:
    declared = [json.loads((SOLUTIONS / s / "solution.json").read_text()) for s in SGLANG]
    assert sorted(d["definition"] for d in declared) == ATTRIBUTED
    assert {d["env"] for d in declared} == {"sglang-0.5.22"}
    assert all("cpu" not in d["spec"]["target_hardware"] for d in declared)


@pytest.mark.parametrize(("solution", "uuid"), cases())
def test_the_solution_with_stand_ins_matches_the_reference(
    solution: str, uuid: str, tmp_path: Path
) -> None:
    with standing_in():
        loaded = load(solution, tmp_path)
        definition = definition_of(loaded_definition(solution))
        inputs = inputs_of(definition, uuid)
        before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
        prepared = loaded.prepare(*inputs.values()) if loaded.prepare else None
        outputs = loaded.call(inputs, None, prepared)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    references = run_reference(definition, inputs)
    dtypes = [torch_dtype(spec["dtype"]) for spec in definition["outputs"].values()]
    comparisons = compare_outputs(definition, outputs, references, dtypes)
    assert overall_status(comparisons) == "PASSED", [c.message for c in comparisons]
    assert all(torch.equal(before[k], inputs[k]) for k in before), "an input was mutated"


def loaded_definition(solution: str) -> str:
    return str(json.loads((SOLUTIONS / solution / "solution.json").read_text())["definition"])


def test_every_sglang_solution_reads_unsupported_device_on_the_cpu(tmp_path: Path) -> None:
    """Through the real CLI (audit, host runtime, smoke suite): never imported on the CPU, so
    no SGLang package is needed here, and the line says why."""
    out = tmp_path / "audit"
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--data-root", str(SHIPPED_ROOT)]
    argv += ["--out", str(out), "--solutions-root", str(SOLUTIONS)]
    for name in SGLANG:
        argv += ["--solution", name]
    result = CliRunner().invoke(app, argv)
    lines = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert result.exit_code == 0, result.output
    assert sorted({line["solution"] for line in lines}) == SGLANG
    targets = {
        name: json.loads((SOLUTIONS / name / "solution.json").read_text())["spec"][
            "target_hardware"
        ]
        for name in SGLANG
    }
    for line in lines:
        assert line["status"] == "UNSUPPORTED_DEVICE", line
        message = line["message"]
        assert "this run is on the CPU" in message, message
        assert all(t in message for t in targets[line["solution"]]), message


def adapter_of(solution: str) -> Any:
    """A solution's adapter.py as a module of its own name (pure torch: importable here),
    registered under that name (its dataclasses look their module up while being made)."""
    import importlib.util
    import sys

    path = SOLUTIONS / solution / "adapter.py"
    spec = importlib.util.spec_from_file_location(f"adapter_{solution.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_qsa_conversion_is_exact_on_the_samples_only() -> None:
    """The FP8 conversion the DSA indexer needs keeps the definition's small-integer samples
    exactly and changes general bf16 values: what the solution and docs/audit/sglang.md say."""
    quantize = adapter_of("qsa_index_h64_d128_ps64_topk2048-sglang").quantize_blocks
    generator = torch.Generator().manual_seed(0)
    samples = torch.randint(-3, 4, (64, 128), generator=generator).to(torch.bfloat16)
    values, scale = quantize(samples)
    assert torch.equal(values.float() * scale.view(-1, 1), samples.float())
    general = torch.randn(64, 128, generator=generator).to(torch.bfloat16)
    values, scale = quantize(general)
    assert not torch.equal(values.float() * scale.view(-1, 1), general.float())


def test_the_qsa_ordering_keeps_the_cut_and_the_tie_rule() -> None:
    """Rows of every kind: empty, shorter than 2048, all tied, and a tie at the cut that the
    native top-k settled the other way (higher positions)."""
    ordered_topk = adapter_of("qsa_index_h64_d128_ps64_topk2048-sglang").ordered_topk
    width = 3000
    logits = torch.zeros(4, width)
    logits[3, :100] = 1.0  # 100 above the cut, then 2900 tied zeros for 1948 places
    seq_lens = torch.tensor([0, 10, 3000, 3000], dtype=torch.int32)
    native = torch.full((4, 2048), -1, dtype=torch.int32)
    native[1, :10] = torch.arange(9, -1, -1)
    native[2] = torch.arange(width - 2048, width)  # ties kept at the high end
    native[3] = torch.cat([torch.arange(100), torch.arange(width - 1948, width)])
    out = ordered_topk(logits, native, seq_lens)
    assert (out[0] == -1).all()
    assert (
        torch.equal(out[1, :10], torch.arange(10, dtype=torch.int32)) and (out[1, 10:] == -1).all()
    )
    assert torch.equal(out[2], torch.arange(2048, dtype=torch.int32))
    assert torch.equal(out[3], torch.arange(2048, dtype=torch.int32))


@pytest.mark.parametrize("uuid", ["d98c332a", "d3da440b", "fbf5da25"])
def test_the_segment_plan_covers_the_block_causal_mask(uuid: str) -> None:
    """On the dev/all image_ids (long rows): the sequences of the planned varlen calls, read
    with FA3's semantics, give every query exactly the keys the definition lets it see."""
    adapter = adapter_of("prefix_zero_block_causal_attention_h16_kv8_d256-sglang")
    definition = definition_of("prefix_zero_block_causal_attention_h16_kv8_d256")
    w = next(wl for wl in shipped().workloads_of(definition["name"]) if wl.uuid.startswith(uuid))
    image_ids = inputs_of(definition, w.uuid)["image_ids"]
    batch, seq = image_ids.shape
    seen = torch.zeros(batch * seq, seq, dtype=torch.int8)
    for call in adapter.plan(image_ids, torch.device("cpu")):
        spans = zip(
            call.cu_seqlens_q.tolist(), call.seqused_q.tolist(), call.cu_seqlens_k.tolist(),
            call.seqused_k.tolist(), strict=False,
        )  # fmt: skip
        for q_start, q_len, k_start, k_len in spans:
            row, first = divmod(q_start, seq)
            assert k_start == row * seq and first + q_len <= k_len <= seq
            for i in range(q_len):
                last = first + i if call.causal else k_len - 1
                seen[q_start + i, : last + 1] += 1
    ids = image_ids.to(torch.int64)
    pos = torch.arange(seq)
    want = (pos.view(1, 1, -1) <= pos.view(1, -1, 1)) | (
        (ids.unsqueeze(2) >= 0) & (ids.unsqueeze(2) == ids.unsqueeze(1))
    )
    assert torch.equal(seen, want.reshape(batch * seq, seq).to(torch.int8))


def test_the_prefix_pool_works_for_pages_of_64_too() -> None:
    """The pool and page table of the cached-prefix adapter at page size 64 (not SGLang's
    default 1): a page's tail past the keys is never read, and the pages gather back to
    [prefix; chunk]."""
    adapter = adapter_of("cached_prefix_attention_h16_kv8_d256-sglang")
    q = torch.zeros(3, 5, 16, 8)
    prefix_k, k = torch.randn(3, 70, 8, 8), torch.randn(3, 5, 8, 8)
    paged = adapter.plan(q, prefix_k, page_size=64)
    adapter.write_pool(paged, prefix_k, prefix_k, k, k)
    assert paged.page_table.dtype == torch.int32 and paged.page_table.shape == (3, 2)
    for b in range(3):
        rows = paged.k_pool[paged.page_table[b].long()].reshape(-1, 8, 8)[:75]
        assert torch.equal(rows, torch.cat([prefix_k[b], k[b]]))
