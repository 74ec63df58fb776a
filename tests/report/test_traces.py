"""FlashInfer-Bench traces: our measured H100 lines export to a valid TraceSet `traces/` tree,
byte for byte the same on every export, and come back through merge with status and latency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envaudit.report.merge import MergeResult, merge_files
from envaudit.report.summary import SolutionInfo
from envaudit.report.traces import LOG_LIMIT, export_traces, line_to_trace, trace_to_line
from envaudit.schema.models import Trace
from envaudit.schema.result_line import ResultLine

REPO = Path(__file__).resolve().parents[2]
RESULTS = sorted((REPO / "docs" / "results" / "h100").glob("dev-?.jsonl"))
DATASET = REPO / "workloads"

Json = dict[str, Any]


def _solutions() -> dict[str, SolutionInfo]:
    found = {}
    for path in sorted((REPO / "solutions").glob("*/solution.json")):
        raw = json.loads(path.read_text())
        found[raw["name"]] = SolutionInfo(
            name=raw["name"],
            definition=raw["definition"],
            author=raw["author"],
            env=raw.get("env") or "",
            baseline=bool(raw.get("baseline")),
        )
    return found


def _definitions() -> dict[str, Json]:
    found = {}
    for path in sorted((DATASET / "definitions").rglob("*.json")):
        raw = json.loads(path.read_text())
        found[raw["name"]] = raw
    return found


def _workloads() -> dict[str, Json]:
    found = {}
    for path in sorted((DATASET / "workloads").rglob("*.jsonl")):
        for raw in path.read_text().splitlines():
            if raw.strip():
                workload = json.loads(raw)["workload"]
                found[workload["uuid"]] = workload
    return found


@pytest.fixture(scope="module")
def merged() -> MergeResult:
    assert RESULTS, "docs/results/h100 has no result files"
    return merge_files(RESULTS)


@pytest.fixture(scope="module")
def exported(merged: MergeResult, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("export")
    return export_traces(merged.lines, _solutions(), _definitions(), _workloads(), out)


def _traces(paths: list[Path]) -> list[Json]:
    return [json.loads(raw) for path in paths for raw in path.read_text().splitlines()]


def _medians(line: ResultLine) -> list[float | None]:
    return [line.median("eager"), line.median("graph")]


def test_paths_follow_the_traceset_layout(exported: list[Path], merged: MergeResult) -> None:
    solutions, definitions = _solutions(), _definitions()
    assert exported == sorted(exported)
    for path in exported:
        root = path.parents[3]
        kind, author, op_type, name = path.relative_to(root).parts
        assert (kind, name) == ("traces", path.stem + ".jsonl")
        assert definitions[path.stem]["op_type"] == op_type
        for trace in _traces([path]):
            assert trace["definition"] == path.stem
            assert solutions[trace["solution"]].author == author
    assert len(_traces(exported)) == len(merged.lines)


def test_every_trace_validates_and_carries_the_dataset_workload(exported: list[Path]) -> None:
    workloads = _workloads()
    for trace in _traces(exported):
        model = Trace.model_validate(trace)
        assert model.evaluation is not None
        assert model.evaluation.environment.hardware == "NVIDIA H100 80GB HBM3"
        assert model.evaluation.environment.libs["torch"] == "2.11.0+cu130"
        assert model.evaluation.environment.libs["envaudit_env"] == "torch-2.11-cu130"
        assert trace["workload"] == workloads[trace["workload"]["uuid"]]
        correctness = model.evaluation.correctness
        assert correctness is not None and correctness.extra is not None
        assert correctness.extra["outputs"][0]["matched"] > 0


def test_speedups_compare_with_the_baseline(exported: list[Path]) -> None:
    solutions = _solutions()
    for trace in _traces(exported):
        evaluation = trace["evaluation"]
        assert evaluation["status"] == "PASSED"
        performance = evaluation["performance"]
        assert performance["latency_ms"] > 0
        assert performance["reference_latency_ms"] > 0
        if solutions[trace["solution"]].baseline:
            assert performance["speedup_factor"] == 1.0
        else:
            assert performance["speedup_factor"] > 0


def test_a_no_graph_baseline_is_compared_by_its_eager_figure(merged: MergeResult) -> None:
    """grouped_gemm's torch baseline cannot be captured in a graph: by the report's one
    comparison rule the grouped solution's graph figure is set against the baseline's eager
    figure (the speedup summary.json prints, "eager/graph"), not its own eager figure."""
    lines = {(ln.solution, ln.workload.uuid): ln for ln in merged.lines}
    mine = next(ln for (s, _), ln in lines.items() if s.endswith("down_n4096_k1536-grouped"))
    base = lines[("grouped_gemm_bf16_down_n4096_k1536-torch", mine.workload.uuid)]
    assert mine.stats("graph") and not base.stats("graph")
    perf = line_to_trace(mine, {}, base)["evaluation"]["performance"]
    assert perf["latency_ms"] == mine.median("graph")
    assert perf["reference_latency_ms"] == base.median("eager")


def test_export_is_byte_stable(merged: MergeResult, exported: list[Path], tmp_path: Path) -> None:
    again = export_traces(
        reversed(merged.lines), _solutions(), _definitions(), _workloads(), tmp_path
    )
    first_root, second_root = exported[0].parents[3], tmp_path
    assert [p.relative_to(second_root) for p in again] == [
        p.relative_to(first_root) for p in exported
    ]
    for a, b in zip(exported, again, strict=True):
        assert a.read_bytes() == b.read_bytes()
    rewritten = export_traces(merged.lines, _solutions(), _definitions(), _workloads(), tmp_path)
    assert [p.read_bytes() for p in rewritten] == [p.read_bytes() for p in exported]
    assert not list(tmp_path.rglob("*.tmp"))


def test_baseline_on_another_gpu_of_the_same_model(exported: list[Path]) -> None:
    """audio_attention's flex solution ran on a second H100 (dev-b), its baseline on the first
    (dev-a): the trace names only the model, so the speedup compares across the two."""
    traces = _traces(exported)
    flex = [t for t in traces if t["solution"] == "audio_attention_h20_d64-flex"]
    base = {
        t["workload"]["uuid"]: t["evaluation"]["performance"]["latency_ms"]
        for t in traces
        if t["solution"] == "audio_attention_h20_d64-torch"
    }
    assert len(flex) == 2
    for trace in flex:
        performance = trace["evaluation"]["performance"]
        assert performance["reference_latency_ms"] == base[trace["workload"]["uuid"]]


def test_round_trip_through_merge(merged: MergeResult, exported: list[Path]) -> None:
    back = merge_files(exported, convert=trace_to_line)
    assert not back.findings and not back.conflicts and back.repeats == 0
    original = {(ln.solution, ln.workload.uuid): ln for ln in merged.lines}
    latency = {
        (t["solution"], t["workload"]["uuid"]): t["evaluation"]["performance"]["latency_ms"]
        for t in _traces(exported)
    }
    assert len(back.lines) == len(original)
    for line in back.lines:
        key = (line.solution, line.workload.uuid)
        source = original[key]
        assert line.status == source.status
        assert line.median("eager") == latency[key]
        assert latency[key] in _medians(source)
        assert line.context.env == source.context.env
        assert line.closure_hash == source.closure_hash
        assert line.correctness and (line.correctness.outputs[0].matched or 0) > 0
        assert line.environment.gpu_name == source.environment.gpu_name


def test_failed_line_has_no_performance_and_a_bounded_log() -> None:
    line = {
        "schema_version": 2,
        "definition": "d",
        "workload": {"uuid": "u-1", "label": None, "axes": {"M": 3}},
        "solution": "d-x",
        "status": "RUNTIME_ERROR",
        "message": "x" * (LOG_LIMIT + 500),
        "correctness": None,
        "context": {"env": "e", "closure_hash": "abc", "device_id": None},
        "environment": {"python": "3.12.3", "cudnn": 91900},
        "timestamp": "2026-01-01T00:00:00+00:00",
    }
    trace = line_to_trace(line, {}, None)
    Trace.model_validate(trace)
    evaluation = trace["evaluation"]
    assert trace["workload"] == {"uuid": "u-1", "axes": {"M": 3}, "inputs": {}}
    assert "performance" not in evaluation and "correctness" not in evaluation
    assert evaluation["log"].startswith("x" * LOG_LIMIT) and "500 more" in evaluation["log"]
    assert evaluation["environment"] == {
        "hardware": "cpu",
        "libs": {"python": "3.12.3", "cudnn": "91900", "envaudit_env": "e", "closure_hash": "abc"},
    }
    back = trace_to_line(trace)
    assert back is not None
    assert back["timing"] is None
    assert back["context"]["closure_hash"] == "abc"
    assert back["environment"]["gpu_name"] is None


def test_flashinfer_bench_traces_merge_and_workload_lines_are_findings(tmp_path: Path) -> None:
    workload = {"uuid": "w-1", "axes": {"M": 8}, "inputs": {"a": {"type": "random"}}}
    evaluation = {
        "status": "PASSED",
        "log": "",
        "environment": {"hardware": "NVIDIA B200", "libs": {"torch": "2.8.0", "cuda": "12.9"}},
        "timestamp": "2025-10-01T12:00:00",
        "correctness": {"max_relative_error": 0.001, "max_absolute_error": 0.0005},
        "performance": {"latency_ms": 0.25, "reference_latency_ms": 0.5, "speedup_factor": 2.0},
    }
    lines = [
        {"definition": "gemm_x", "workload": workload, "solution": None, "evaluation": None},
        {"definition": "gemm_x", "workload": workload, "solution": "s1", "evaluation": evaluation},
    ]
    path = tmp_path / "traces" / "someone" / "gemm" / "gemm_x.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(t) + "\n" for t in lines))
    result = merge_files([path], convert=trace_to_line)
    assert [f.line for f in result.findings] == [1]
    assert "without an evaluation" in result.findings[0].message
    (read,) = result.lines
    assert read.solution == "s1" and read.status == "PASSED"
    line = read.written()
    assert line["timing"] == {"eager": {"mode": "flashinfer-bench", "median_ms": 0.25}}
    assert line["context"] == {
        "runtime": "flashinfer-bench",
        "env": "cuda=12.9;torch=2.8.0",
        "closure_hash": None,
        "image_id": None,
        "device_id": "NVIDIA B200",
    }
    assert line["environment"] == {
        "torch": "2.8.0",
        "cuda": "12.9",
        "gpu_name": "NVIDIA B200",
        "gpu_uuid": None,
    }
    assert line["correctness"] == {"max_absolute_error": 0.0005, "max_relative_error": 0.001}
    assert line["timestamp"] == "2025-10-01T12:00:00"
    assert line["workload"] == {
        "uuid": "w-1",
        "label": None,
        "axes": {"M": 8},
        "inputs": {"a": {"type": "random"}},
    }
    # exported again with no dataset and no baseline line: nothing the trace said is lost
    again = line_to_trace(read, {}, None)["evaluation"]
    assert again["performance"] == evaluation["performance"]
    assert line_to_trace(read, {}, None)["workload"]["inputs"] == workload["inputs"]


def test_an_invalid_trace_stops_the_export_before_writing(tmp_path: Path) -> None:
    raw = {
        "schema_version": 2,
        "definition": "d",
        "workload": {"uuid": "u-1", "axes": {}},
        "solution": "d-x",
        "status": "EXPLODED",
    }
    line = ResultLine.model_validate(raw).read_from("r.jsonl:7")
    with pytest.raises(ValueError, match=r"r\.jsonl:7: not a valid FlashInfer-Bench trace"):
        export_traces([line], {}, {}, {}, tmp_path)
    assert not list(tmp_path.rglob("*"))
