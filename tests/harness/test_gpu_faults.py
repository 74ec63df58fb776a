"""On a GPU: the fault solutions, plus one that computes on an unsynchronised side stream.

Skipped where torch sees no CUDA device (CI); run on the GPU machine with `pytest -m gpu`.
"""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.settings import GPU_FAULTS, TEST_OUT, read
from tests.conftest import UUID_BLOB, UUID_RANDOM, write_toy_root
from tests.harness.test_faults import EXPECTED, SOLUTIONS, write_solution

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SIDE_STREAM = """
SIDE = None
def run(x, lengths, scale):
    global SIDE
    if SIDE is None:
        SIDE = torch.cuda.Stream()
    out = torch.empty_like(x)
    SIDE.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(SIDE):
        torch.cuda._sleep(100_000_000)
        out.copy_(scaled(x, lengths, scale))
    return out
"""

GPU_SOLUTIONS = {**SOLUTIONS, "side_stream": (SIDE_STREAM, False)}
# ENVAUDIT_GPU_FAULTS=a,b limits the run to those solutions (device time is scarce).
_ONLY = read(GPU_FAULTS) or ()
GPU_EXPECTED_ALL = {
    **EXPECTED,
    "gpu_only": ("PASSED", "PASSED"),
    "side_stream": ("INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL"),
}
GPU_EXPECTED = {k: v for k, v in GPU_EXPECTED_ALL.items() if not _ONLY or k in _ONLY}


def gpu_uuid() -> str:
    raw = str(torch.cuda.get_device_properties(0).uuid)
    return raw if raw.startswith("GPU-") else f"GPU-{raw}"


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, dict]]:
    base = tmp_path_factory.mktemp("gpu-faults")
    root = write_toy_root(base / "data")
    for name in GPU_EXPECTED:
        write_solution(base / "solutions", name, GPU_SOLUTIONS)
    report = base / "results.jsonl"
    for name in GPU_EXPECTED:
        argv = ["run", "--solution", name, "--gpu", gpu_uuid(), "--data-root", str(root)]
        argv += ["--solutions-root", str(base / "solutions"), "--report", str(report)]
        argv += ["--timeout", "20", "--graph-timing"]
        CliRunner().invoke(app, argv)
    lines: dict[str, dict[str, dict]] = {}
    for raw in report.read_text().splitlines():
        line = json.loads(raw)
        lines.setdefault(line["solution"], {})[line["workload"]["uuid"]] = line
    out = read(TEST_OUT)  # keep the lines for inspection on the GPU machine
    if out is not None:
        (out / "gpu_faults.json").write_text(json.dumps(lines, indent=1, default=str))
    return lines


@pytest.mark.parametrize("name", list(GPU_EXPECTED))
def test_gpu_statuses(gpu_run: dict, name: str) -> None:
    got = gpu_run[name]
    assert (got[UUID_BLOB]["status"], got[UUID_RANDOM]["status"]) == GPU_EXPECTED[name], (
        got[UUID_BLOB].get("message"),
        got[UUID_RANDOM].get("message"),
    )


def test_gpu_record_and_timing(gpu_run: dict) -> None:
    line = gpu_run["correct"][UUID_BLOB]
    env = line["environment"]
    assert env["gpu_uuid"] == gpu_uuid() and env["compute_capability"]
    assert line["timing"]["eager"]["mode"] == "cuda_events"
    assert line["timing"]["graph"]["mode"] == "cuda_graph"
    assert line["timing"]["eager"]["l2_flush_bytes"] >= 64 << 20
