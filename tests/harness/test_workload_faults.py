"""A workload that cannot be evaluated is the dataset's fault (WORKLOAD_ERROR), never the
solution's: inputs larger than the device, a negative axis, a reference that raises or never
returns. A correct solution runs against each through `envaudit run --runtime host --device
cpu`; before the judge these read RUNTIME_ERROR ("worker exited with status 1 during this
workload") or TIMEOUT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import UUID_RANDOM, write_toy_root
from tests.harness.test_faults import write_solution

HUGE = "00000000-0000-4000-8000-0000000000a1"
NEGATIVE = "00000000-0000-4000-8000-0000000000a2"


def _root(base: Path, reference: str | None = None) -> Path:
    root = write_toy_root(base / "data")
    path = root / "definitions/toy/toy_scale.json"
    definition = json.loads(path.read_text())
    if reference is not None:
        definition["reference"] = reference
        path.write_text(json.dumps(definition))
    workloads = root / "workloads/toy/toy_scale.jsonl"
    for uuid, axes in ((HUGE, {"B": 10**6, "S": 10**6}), (NEGATIVE, {"B": -2, "S": 3})):
        inputs = {"x": {"type": "random"}, "lengths": {"type": "random"}}
        inputs["scale"] = {"type": "scalar", "value": 1.0}
        workload = {"uuid": uuid, "axes": axes, "inputs": inputs, "seed": 1}
        trace = {"definition": "toy_scale", "workload": workload}
        with workloads.open("a") as handle:
            handle.write(json.dumps(trace) + "\n")
    write_solution(base / "solutions", "correct")
    return root


def _run(base: Path, root: Path, *extra: str) -> tuple[int, dict[str, dict]]:
    report = base / "results.jsonl"
    argv = ["run", "--solution", "correct", "--device", "cpu", "--data-root", str(root)]
    argv += ["--solutions-root", str(base / "solutions"), "--report", str(report), *extra]
    code = CliRunner().invoke(app, argv).exit_code
    lines = [json.loads(raw) for raw in report.read_text().splitlines()]
    return code, {line["workload"]["uuid"]: line for line in lines}


@pytest.mark.parametrize(("uuid", "words"), [(HUGE, "GiB, more than"), (NEGATIVE, "axis B is -2")])
def test_inputs_that_cannot_be_drawn(tmp_path: Path, uuid: str, words: str) -> None:
    root = _root(tmp_path)
    code, lines = _run(tmp_path, root, "--workload", uuid, "--timeout", "60")
    assert lines[uuid]["status"] == "WORKLOAD_ERROR", lines[uuid]["message"]
    assert words in lines[uuid]["message"]
    assert code == 1


def test_a_reference_that_raises(tmp_path: Path) -> None:
    root = _root(tmp_path, "def run(x, lengths, scale):\n    raise ValueError('no reference')\n")
    _, lines = _run(tmp_path, root, "--workload", UUID_RANDOM, "--timeout", "60")
    line = lines[UUID_RANDOM]
    assert line["status"] == "WORKLOAD_ERROR", line["message"]
    assert "the definition's reference raised ValueError: no reference" in line["message"]


def test_a_reference_that_never_returns(tmp_path: Path) -> None:
    hang = "import time\n\ndef run(x, lengths, scale):\n    time.sleep(3600)\n"
    root = _root(tmp_path, hang)
    _, lines = _run(tmp_path, root, "--workload", UUID_RANDOM, "--timeout", "8")
    line = lines[UUID_RANDOM]
    assert line["status"] == "WORKLOAD_ERROR", line["message"]
    assert "reference did not return within 8 s" in line["message"]
