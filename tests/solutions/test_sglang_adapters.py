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
