"""Our traces, read by the real FlashInfer-Bench (flashinfer-bench 0.1.2, installed by `make
bootstrap` without its CUDA dependencies): real result lines of every status we produce (the
fault solutions of tests/harness/test_faults.py, run on the CPU) are exported by `envaudit merge`
and loaded with its own `TraceSet.from_path`; none is dropped, PASSED and INCORRECT_NUMERICAL keep
their figures, and our own status survives the round trip back through merge."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from flashinfer_bench.data import TraceSet
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.report.traces import STATUS_LIB, THEIR_STATUS
from envaudit.schema.models import EvaluationStatus
from tests.conftest import write_toy_root
from tests.harness.test_faults import EXPECTED, HANG_TIMEOUT_S, write_solution

HUGE = "00000000-0000-4000-8000-0000000000a1"


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    """(a FlashInfer-Bench root holding the toy definitions, workloads and our exported traces,
    the result lines they came from)."""
    base = tmp_path_factory.mktemp("fib")
    root = write_toy_root(base / "data")
    solutions = base / "solutions"
    report = base / "results.jsonl"
    for name in EXPECTED:
        write_solution(solutions, name)
        argv = ["run", "--solution", name, "--device", "cpu", "--data-root", str(root)]
        argv += ["--solutions-root", str(solutions), "--report", str(report)]
        argv += ["--timeout", str(HANG_TIMEOUT_S if name == "hang" else 20)]
        CliRunner().invoke(app, argv)
    # WORKLOAD_ERROR: a workload whose inputs are larger than any device (the dataset's fault)
    huge = {"uuid": HUGE, "axes": {"B": 10**6, "S": 10**6}, "seed": 1}
    huge["inputs"] = {"x": {"type": "random"}, "lengths": {"type": "random"}}
    huge["inputs"]["scale"] = {"type": "scalar", "value": 1.0}
    with (root / "workloads/toy/toy_scale.jsonl").open("a") as handle:
        handle.write(json.dumps({"definition": "toy_scale", "workload": huge}) + "\n")
    argv = ["run", "--solution", "correct", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions), "--report", str(report), "--workload", HUGE]
    CliRunner().invoke(app, argv)
    lines = [json.loads(x) for x in report.read_text().splitlines()]
    out = base / "out"
    argv = ["merge", str(report), "--out", str(out), "--data-root", str(root)]
    argv += ["--solutions-root", str(solutions)]
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, result.output
    fib = base / "fib"
    shutil.copytree(root / "definitions", fib / "definitions")
    shutil.copytree(root / "workloads", fib / "workloads")
    shutil.copytree(out / "traces", fib / "traces")
    return fib, lines


def test_every_status_we_produce_is_exported(exported: tuple[Path, list[dict]]) -> None:
    _, lines = exported
    assert {line["status"] for line in lines} == {s.value for s in EvaluationStatus}


def test_flashinfer_bench_loads_every_line(exported: tuple[Path, list[dict]]) -> None:
    fib, lines = exported
    traces = [t for found in TraceSet.from_path(str(fib)).traces.values() for t in found]
    assert len(traces) == len(lines)
    ours = sorted((x["solution"], x["workload"]["uuid"], x["status"]) for x in lines)
    theirs = sorted(
        (
            t.solution,
            t.workload.uuid,
            t.evaluation.environment.libs.get(STATUS_LIB, t.evaluation.status.value),
        )
        for t in traces
        if t.evaluation is not None
    )
    assert theirs == ours
    for trace in traces:
        assert trace.evaluation is not None
        status = trace.evaluation.status.value
        kept = trace.evaluation.environment.libs.get(STATUS_LIB)
        assert kept is None or THEIR_STATUS[kept] == status
        if status in ("PASSED", "INCORRECT_NUMERICAL"):
            assert trace.evaluation.correctness is not None
        if status == "PASSED":
            assert trace.evaluation.performance is not None
            assert trace.evaluation.performance.latency_ms > 0


def test_our_statuses_come_back_through_merge(
    exported: tuple[Path, list[dict]], tmp_path: Path
) -> None:
    fib, lines = exported
    files = sorted((fib / "traces").rglob("*.jsonl"))
    result = CliRunner().invoke(app, ["merge", *map(str, files), "--out", str(tmp_path / "back")])
    assert result.exit_code == 0, result.output
    back = [json.loads(x) for x in (tmp_path / "back" / "results.jsonl").read_text().splitlines()]
    assert sorted((x["solution"], x["status"]) for x in back) == sorted(
        (x["solution"], x["status"]) for x in lines
    )


def test_a_root_written_by_its_api_passes_check_inputs(tmp_path: Path) -> None:
    """Its serializer leaves defaulted `type`s out (axes {"value": 128} or {}, random inputs
    {}): check-inputs must read them as FlashInfer-Bench does."""
    from flashinfer_bench.data import Definition, Trace, save_json_file, save_jsonl_file

    ours = write_toy_root(tmp_path / "ours")
    root = tmp_path / "theirs"
    for path in sorted((ours / "definitions").rglob("*.json")):
        raw = json.loads(path.read_text())
        for axis in raw["axes"].values():  # as AxisConst(value=...) / AxisVar() would leave it
            axis.pop("type")
        save_json_file(Definition.model_validate(raw), root / path.relative_to(ours))
    for path in sorted((ours / "workloads").rglob("*.jsonl")):
        traces = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        for trace in traces:
            for spec in trace["workload"]["inputs"].values():
                if spec["type"] == "random":  # RandomInput()
                    spec.pop("type")
        save_jsonl_file([Trace.model_validate(t) for t in traces], root / path.relative_to(ours))
    shutil.copytree(ours / "blob", root / "blob")
    written = json.loads((root / "definitions/toy/toy_scale.json").read_text())
    assert all("type" not in axis for axis in written["axes"].values())
    result = CliRunner().invoke(app, ["check-inputs", "--data-root", str(root)])
    assert result.exit_code == 0, result.output


def test_its_traces_and_solutions_merge_without_loss(tmp_path: Path) -> None:
    """A root written by FlashInfer-Bench (solutions/<author>/<op_type>/<def>/<name>.json,
    traces with its own reference latency and speedup) merges and exports back unchanged in
    what it said: author, reference latency, speedup, workload inputs."""
    from flashinfer_bench.data import (
        Correctness,
        Environment,
        Evaluation,
        EvaluationStatus,
        Performance,
        Solution,
        Trace,
        save_json_file,
        save_jsonl_file,
    )

    fib = write_toy_root(tmp_path / "fib")
    solution = Solution.model_validate(
        {
            "name": "toy_scale-alice",
            "definition": "toy_scale",
            "author": "alice",
            "spec": {"language": "python", "target_hardware": ["cuda"], "entry_point": "m.py::run"},
            "sources": [{"path": "m.py", "content": "def run(x, lengths, scale): ..."}],
        }
    )
    save_json_file(solution, fib / "solutions/alice/toy/toy_scale/toy_scale-alice.json")
    workload = json.loads((fib / "workloads/toy/toy_scale.jsonl").read_text().splitlines()[1])
    performance = Performance(latency_ms=0.25, reference_latency_ms=0.75, speedup_factor=3.0)
    trace = Trace.model_validate(
        {
            "definition": "toy_scale",
            "workload": workload["workload"],
            "solution": "toy_scale-alice",
            "evaluation": Evaluation(
                status=EvaluationStatus.PASSED,
                environment=Environment(hardware="NVIDIA B200", libs={"torch": "2.8.0"}),
                timestamp="2025-10-01T12:00:00",
                correctness=Correctness(max_relative_error=1e-3, max_absolute_error=5e-4),
                performance=performance,
            ),
        }
    )
    source = fib / "traces/alice/toy/toy_scale.jsonl"
    save_jsonl_file([trace], source)
    out = tmp_path / "out"
    argv = ["merge", str(source), "--out", str(out), "--data-root", str(fib)]
    result = CliRunner().invoke(app, [*argv, "--solutions-root", str(fib / "solutions")])
    assert result.exit_code == 0, result.output
    (back,) = [
        t for found in TraceSet.from_path(str(_root_of(fib, out))).traces.values() for t in found
    ]
    assert back.evaluation is not None and back.evaluation.performance == performance
    assert back.workload.inputs == trace.workload.inputs
    assert (out / "traces/alice/toy/toy_scale.jsonl").is_file()  # the author, not "unknown"
    performance_md = (out / "performance.md").read_text()
    assert "--runtime flashinfer-bench" not in performance_md  # no such runtime
    assert "measured by FlashInfer-Bench" in performance_md


def _root_of(data: Path, report: Path) -> Path:
    """A FlashInfer-Bench root of the dataset's definitions and workloads and the report's
    traces."""
    root = report.parent / "fib-back"
    shutil.copytree(data / "definitions", root / "definitions")
    shutil.copytree(data / "workloads", root / "workloads")
    shutil.copytree(report / "traces", root / "traces")
    return root


def test_our_solutions_export_as_solutions_its_loader_accepts(tmp_path: Path) -> None:
    from tests.conftest import REPO

    out = tmp_path / "fib"
    argv = ["export-solutions", "--out", str(out), "--data-root", str(REPO / "workloads")]
    result = CliRunner().invoke(app, [*argv, "--solutions-root", str(REPO / "solutions")])
    assert result.exit_code == 0, result.output
    shutil.copytree(REPO / "workloads" / "definitions", out / "definitions")
    loaded = TraceSet.from_path(str(out))
    ours = sorted(p.parent.name for p in (REPO / "solutions").glob("*/solution.json"))
    theirs = sorted(s.name for found in loaded.solutions.values() for s in found)
    assert theirs == ours
    solution = next(s for found in loaded.solutions.values() for s in found if s.name == ours[0])
    assert solution.sources[0].content == (REPO / "solutions" / ours[0] / "main.py").read_text()
    assert (out / "solutions" / solution.author).is_dir()


def test_get_best_trace_picks_our_fastest_passing_solution_per_workload(tmp_path: Path) -> None:
    """On the committed report (21 definitions; an H200 model, and the H100 for DeepGEMM's five
    GEMM definitions): for every workload FlashInfer-Bench's own `get_best_trace`, given the
    workload's axes and no error bound, picks the solution our summary has fastest among those
    that passed there. It knows no GPU model, so where a definition ran on two, the fastest is
    taken over both (each speedup is over the baseline on its own card). Its default bounds
    (max_absolute_error and max_relative_error <= 1e-2, on the maxima over all elements) are
    another rule than any definition's tolerance (docs/dataset-format.md), so they are lifted."""
    repo = Path(__file__).resolve().parents[2]
    for part in ("definitions", "workloads"):
        shutil.copytree(repo / "workloads" / part, tmp_path / part)
    shutil.copytree(repo / "docs" / "report" / "traces", tmp_path / "traces")
    traceset = TraceSet.from_path(str(tmp_path))
    summary = json.loads((repo / "docs" / "report" / "summary.json").read_text())
    axes_of = {
        json.loads(raw)["workload"]["uuid"]: json.loads(raw)["workload"]["axes"]
        for path in (repo / "workloads" / "workloads").rglob("*.jsonl")
        for raw in path.read_text().splitlines()
    }
    checked = 0
    for name, block in summary["definitions"].items():
        best: dict[str, tuple[float, str]] = {}
        entries = [e for device in block["devices"].values() for e in device["solutions"]]
        for entry in entries:
            for row in entry["per_workload"]:
                speed = row["speedup_primary"]
                if (
                    row["status"] == "PASSED"
                    and speed
                    and speed > best.get(row["uuid"], (0, ""))[0]
                ):
                    best[row["uuid"]] = (speed, entry["solution"])
        for uuid, (_, ours) in best.items():
            theirs = traceset.get_best_trace(
                name, axes_of[uuid], max_abs_error=float("inf"), max_rel_error=float("inf")
            )
            assert theirs is not None and theirs.solution == ours, (name, uuid)
            checked += 1
    assert checked >= 42  # every definition's dev workloads at least


def test_the_relative_error_we_export_is_the_one_it_computes() -> None:
    """Its compute_error_stats on the same tensors (references with exact zeros, where the two
    definitions of a relative error part) gives the max_rel_eps our comparison records, and the
    exported trace carries it."""
    import torch
    from flashinfer_bench.bench.config import BenchmarkConfig
    from flashinfer_bench.bench.utils import compute_error_stats

    from envaudit.harness.compare import compare_output
    from envaudit.report.traces import _correctness
    from envaudit.schema.result_line import Correctness

    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=gen)
    ref[::97] = 0.0
    out = (ref + 1e-3 * torch.randn(4096, generator=gen)).to(torch.bfloat16)
    tol = {"atol": 1e-2, "rtol": 1e-2, "rule": "and", "required_matched_ratio": 1.0}
    ours = compare_output("o", out, ref, torch.bfloat16, tol)
    _, their_rel, _, _ = compute_error_stats(out, ref, BenchmarkConfig())
    assert ours.max_rel_eps is not None and ours.max_rel_eps > 1e4 > ours.max_rel
    assert abs(ours.max_rel_eps - their_rel) <= 1e-5 * their_rel  # float64 against float32
    figures = {"max_relative_error": ours.max_rel, "outputs": [ours.as_dict()]}
    exported = _correctness(Correctness.model_validate(figures))
    assert exported["max_relative_error"] == ours.max_rel_eps
