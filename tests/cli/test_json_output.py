"""`--json` on the commands whose answer a script reads: run, audit, merge and verify-env print
one JSON document on stdout (progress and findings go to stderr), with the same exit code as
their text form. On the CPU, with a toy definition and one correct and one wrong solution."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import write_toy_root
from tests.harness.test_faults import write_solution

SOLUTIONS = {
    "right": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale)", False),
    "wrong": ("def run(x, lengths, scale):\n    return scaled(x, lengths, scale) + 1.0", False),
}


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("json")
    root = write_toy_root(base / "data")
    for name in SOLUTIONS:
        write_solution(base / "solutions", name, SOLUTIONS)
    return {"base": base, "root": root, "solutions": base / "solutions"}


def invoke(*argv: str) -> tuple[int, dict]:
    result = CliRunner().invoke(app, list(argv))
    return result.exit_code, json.loads(result.stdout)


def where(places: dict[str, Path]) -> list[str]:
    return ["--data-root", str(places["root"]), "--solutions-root", str(places["solutions"])]


def test_run_json_names_each_workload_and_the_verdict(places: dict[str, Path]) -> None:
    report = places["base"] / "run.jsonl"
    common = ["--device", "cpu", "--report", str(report), "--validation-only", *where(places)]
    code, answer = invoke("run", "--solution", "right", *common, "--json")
    assert code == 0 and answer["failed"] is False, answer
    assert {row["status"] for row in answer["workloads"]} == {"PASSED"}
    assert len(answer["workloads"]) == 2 and answer["report"] == str(report)
    code, answer = invoke("run", "--solution", "wrong", *common, "--json")
    assert code == 1 and answer["failed"] is True, answer
    assert {row["status"] for row in answer["workloads"]} == {"INCORRECT_NUMERICAL"}


def test_audit_and_merge_json(places: dict[str, Path]) -> None:
    out = places["base"] / "audit"
    argv = ["audit", "--runtime", "host", "--device", "cpu", "--suite", "smoke", "--out", str(out)]
    code, answer = invoke(*argv, *where(places), "--json")
    assert code == 1 and answer["failed"] is True, answer
    assert answer["statuses"].get("INCORRECT_NUMERICAL", 0) >= 1, answer
    assert answer["statuses"].get("PASSED", 0) >= 1, answer
    assert answer["report"] == str(out / "results.jsonl") and answer["errors"] == []
    report = out / "report"
    code, merged = invoke(
        "merge", str(out / "results.jsonl"), "--out", str(report), *where(places), "--json"
    )
    assert code == 0, merged
    assert merged["lines"] == sum(answer["statuses"].values()), (merged, answer)
    assert merged["report_html"] == str(report / "report.html")
    assert str(report / "report.html") in merged["written"]


def test_verify_env_json_lists_the_drift(tmp_path: Path) -> None:
    """This interpreter against the torch-cpu lock: whatever it finds, the JSON says the same
    as the exit code, and names the env."""
    code, answer = invoke("verify-env", "torch-cpu", "--python", sys.executable, "--json")
    assert code in (0, 1)
    assert answer["env"] == "torch-cpu" and answer["failed"] is (code == 1)
    assert {"missing", "different", "extra", "matching"} <= set(answer["drift"])
