"""Every baseline solution passes its definition's smoke suite on the CPU through `envaudit run`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.schema.results import read_lines
from tests.conftest import REPO, SHIPPED_ROOT

SOLUTIONS = REPO / "solutions"


def baselines() -> list[str]:
    names = []
    for path in sorted(SOLUTIONS.glob("*/solution.json")):
        if json.loads(path.read_text()).get("baseline"):
            names.append(path.parent.name)
    return names


REPRESENTATIVE_BASELINES = [
    "dense_attention_h16_d72-torch",
    "gdn_decode_qk4_v8_d128_k_last-torch",
    "mla_mixed_decode_h128_ckv512_kpe64_ps64-torch",
    "moe_router_mm_sqrtsoftplus_e128_h4096_topk6-torch",
]
"""One baseline of each kind, for the tests whose subject is the environment a runtime makes
(the local runtime's venv, a container) rather than the baselines' numerics, which the test
below runs for every baseline on the host. All 21 in each runtime took about 6 of CI's 30
minutes."""


def test_the_representative_baselines_are_baselines() -> None:
    assert set(REPRESENTATIVE_BASELINES) <= set(baselines())


def test_every_definition_has_exactly_one_baseline() -> None:
    definitions = {p.stem for p in (SHIPPED_ROOT / "definitions").rglob("*.json")}
    covered = [
        json.loads((SOLUTIONS / n / "solution.json").read_text())["definition"] for n in baselines()
    ]
    assert sorted(covered) == sorted(definitions)


@pytest.mark.parametrize("name", baselines())
def test_baseline_passes_smoke_on_cpu(name: str, tmp_path: Path) -> None:
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", name, "--runtime", "host", "--device", "cpu", "--suite", "smoke"]
    argv += ["--data-root", str(SHIPPED_ROOT), "--solutions-root", str(SOLUTIONS)]
    argv += ["--report", str(report)]
    result = CliRunner().invoke(app, argv)
    lines = [line for _, line in read_lines(report) if line]
    assert lines, result.output
    assert all(line["status"] == "PASSED" for line in lines), [x["message"] for x in lines]
    assert all(line["timing"]["eager"]["mode"] == "wall_clock" for line in lines)
    assert result.exit_code == 0
