"""The typed result line (envaudit.schema.result_line): every committed result line reads and
writes back to the same JSON, its JSON Schema is the committed one, a bad line is refused naming
the field, version-1 lines (the closure hash twice) read as version 2 (once), and one key
serves --resume, merge, the audit and the supervisor."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from envaudit.report.merge import merge_files, render_results
from envaudit.schema.jsonschema import render_schemas
from envaudit.schema.result_line import ECHO, ResultLine, kept_result_lines, problems
from envaudit.schema.results import (
    RESULT_SCHEMA_VERSION,
    append_line,
    done_keys,
    line_identity,
    line_key,
    result_line,
)
from tests.conftest import REPO

DOCS = REPO / "docs"
SCHEMA = DOCS / "schema" / "result-line.schema.json"


def result_files() -> list[Path]:
    """Every committed file of result lines: docs/report/results.jsonl and docs/results/**, without
    the side files (distribution lists beside a report, audit timelines)."""
    found = [DOCS / "report" / "results.jsonl", *sorted((DOCS / "results").rglob("*.jsonl"))]
    return [
        p for p in found if not p.name.endswith(".distributions.jsonl") and "timeline" not in p.name
    ]


def committed_lines() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.relative_to(REPO)}:{number}", json.loads(text))
        for path in result_files()
        for number, text in enumerate(path.read_text().splitlines(), start=1)
        if text.strip()
    ]


def as_text(line: dict[str, Any]) -> str:
    return json.dumps(line, sort_keys=True, allow_nan=True)


def test_the_committed_schema_is_the_models() -> None:
    assert SCHEMA.read_text() == render_schemas()[SCHEMA.name], "run `make schemas`"
    schema = json.loads(SCHEMA.read_text())
    assert set(schema["required"]) == {
        "schema_version",
        "definition",
        "workload",
        "solution",
        "status",
    }
    assert "lock_closure_hash" not in schema["$defs"]["EnvCheck"]["properties"]
    assert "closure_hash" in schema["$defs"]["Context"]["properties"]


def test_every_committed_result_line_reads_and_writes_back_unchanged() -> None:
    lines = committed_lines()
    assert len(result_files()) > 20 and len(lines) > 2000
    for where, raw in lines:
        try:
            line = ResultLine.model_validate(raw)
        except ValidationError as exc:
            pytest.fail(f"{where}: {problems(exc)}")
        assert as_text(line.written()) == as_text(raw), where
        assert line.key == line_key(raw), where  # one rule, for raw JSON and the model
        assert line.closure_hash == raw["context"]["closure_hash"], where
        assert ECHO not in line.model_dump(exclude_unset=True)["context"].get("env_check", {})


def test_committed_lines_validate_against_the_schema_file() -> None:
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    for where, raw in committed_lines():
        errors = [e.message for e in validator.iter_errors(raw)]
        assert not errors, f"{where}: {errors}"


def a_line(**changes: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "definition": "d",
        "workload": {"uuid": "w1", "label": "w1", "axes": {}},
        "solution": "s",
        "solution_hash": "r1",
        "status": "PASSED",
        "message": "",
        "timing": {"eager": {"median_ms": 1, "iterations": 3}},
        "context": {"runtime": "host", "env": "e", "closure_hash": "c" * 64, "device_id": "cpu"},
        "environment": {"device_type": "cpu"},
        "timestamp": "2026-01-01T00:00:00+00:00",
    }
    line.update(changes)
    return line


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda line: line.pop("status"), "status"),
        (lambda line: line["workload"].pop("uuid"), "workload.uuid"),
        (lambda line: line.update(solution=7), "solution"),
        (lambda line: line["timing"]["eager"].update(median_ms="fast"), "timing.eager.median_ms"),
        (lambda line: line["timing"]["eager"].update(iterations=3.0), "timing.eager.iterations"),
        (lambda line: line["context"].update(closure_hash=5), "context.closure_hash"),
        (lambda line: line["environment"].update(memory_bytes=True), "environment.memory_bytes"),
    ],
)
def test_a_bad_line_is_refused_naming_the_field(change: Any, field: str) -> None:
    line = a_line()
    change(line)
    with pytest.raises(ValidationError) as caught:
        ResultLine.model_validate(line)
    assert problems(caught.value).startswith(f"{field}"), problems(caught.value)


def test_merge_reports_a_refused_line_by_file_line_and_field(tmp_path: Path) -> None:
    bad = a_line()
    bad["timing"]["eager"]["median_ms"] = "fast"
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(a_line()) + "\n" + json.dumps(bad) + "\n")
    merged = merge_files([path])
    assert len(merged.lines) == 1
    [finding] = [f.render() for f in merged.findings]
    assert finding.startswith(f"{path}:2: not a result line (timing.eager.median_ms:"), finding
    assert finding.endswith("; skipped"), finding


def test_figures_and_counts_keep_their_json_type() -> None:
    raw = a_line(wall_s=3, prepare_ms=None)
    raw["timing"]["eager"].update(median_ms=1, mean_ms=1.0, max_ms=float("nan"))
    line = ResultLine.model_validate(raw)
    assert as_text(line.written()) == as_text(raw)
    assert '"median_ms": 1,' in json.dumps(line.written()["timing"]["eager"])


def test_a_version_1_line_reads_with_one_closure_hash_and_writes_back_as_it_was() -> None:
    check = {ECHO: "c" * 64, "matches": True, "built_from_lock": True}
    raw = a_line(schema_version=1)
    raw["context"]["env_check"] = check
    line = ResultLine.model_validate(raw)
    assert line.closure_hash == "c" * 64 and line.context.env_check is not None
    assert line.context.env_check.matches is True
    current = line.model_dump(exclude_unset=True)
    assert current["context"]["env_check"] == {"matches": True, "built_from_lock": True}
    assert line.written() == raw and list(line.written()["context"]["env_check"]) == list(check)
    # merged and written out again: the committed shape, the echo included
    assert json.loads(render_results([line])) == raw


def test_two_closure_hashes_that_differ_are_refused() -> None:
    raw = a_line(schema_version=1)
    raw["context"]["env_check"] = {ECHO: "d" * 64, "matches": True}
    with pytest.raises(ValidationError, match=r"context\.env_check\.lock_closure_hash"):
        ResultLine.model_validate(raw)


def test_lines_written_now_are_version_2_with_the_closure_hash_once() -> None:
    from envaudit.runtime.jobs import RunContext

    context = RunContext(
        runtime="local",
        env="e",
        declared_env="e",
        device_id="cpu",
        closure_hash="c" * 64,
        env_check={"matches": True, "built_from_lock": True},
    )
    job = {"definition": "d", "solution": "s", "context": context.record()}
    raw = result_line(job, {"uuid": "w1"}, {"status": "PASSED", "message": ""}, None, "r", 1.0)
    assert raw["schema_version"] == RESULT_SCHEMA_VERSION == 2
    assert ECHO not in raw["context"]["env_check"]
    line = ResultLine.model_validate(raw)
    assert as_text(line.written()) == as_text(raw)
    # the supervisor's --resume key for this job is the key merge and the audit give the line
    expected = line_identity("s", "w1", context.env, context.closure_hash, context.device_id)
    assert line.key == line_key(raw) == expected == ("s", "w1", "e", "c" * 64, "cpu")


def test_the_key_rule() -> None:
    gpu = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    cpu_line = ResultLine.model_validate(a_line())
    assert cpu_line.key.device == "cpu"
    no_device = a_line(context={"env": "e"}, environment={})
    assert ResultLine.model_validate(no_device).key.device == "cpu"
    measured = a_line(context={"env": "e"}, environment={"gpu_uuid": gpu})
    assert ResultLine.model_validate(measured).key.device == gpu
    mig = "MIG-bbbbbbbb-0000-0000-0000-000000000000"  # the device asked for comes first
    sliced = a_line(context={"env": "e", "device_id": mig}, environment={"gpu_uuid": gpu})
    assert ResultLine.model_validate(sliced).key.device == mig
    no_closure = a_line(context={"env": "e", "closure_hash": None, "device_id": "cpu"})
    assert ResultLine.model_validate(no_closure).key == ("s", "w1", "e", "", "cpu")


def test_resume_merge_and_the_audit_agree_on_a_duplicate(tmp_path: Path) -> None:
    """The same solution and workload in another env (another closure) is another line for all
    of them; the same key twice is one line, the newest, for all of them."""
    report = tmp_path / "r.jsonl"
    first = a_line(timestamp="2026-01-01T00:00:00+00:00")
    again = a_line(timestamp="2026-01-02T00:00:00+00:00", status="TIMEOUT")
    other_env = a_line()
    other_env["context"] = {**other_env["context"], "env": "f", "closure_hash": "f" * 64}
    for line in (first, again, other_env):
        append_line(report, line)
    keys = {ResultLine.model_validate(x).key for x in (first, again, other_env)}
    assert len(keys) == 2
    assert done_keys(report) == keys
    assert set(kept_result_lines(report)) == keys
    merged = merge_files([report])
    assert {line.key for line in merged.lines} == keys and len(merged.conflicts) == 1
    newest = {k: v.status for k, v in kept_result_lines(report).items()}
    assert sorted(newest.values()) == ["PASSED", "TIMEOUT"]
    assert sorted(line.status for line in merged.lines) == ["PASSED", "TIMEOUT"]


def test_a_run_in_another_env_is_not_skipped_by_resume(tmp_path: Path) -> None:
    """`run --resume` skips a workload only when the report has a line of its key: a line of
    the same solution and workload measured in another env does not count."""
    from typer.testing import CliRunner

    from envaudit.cli import app
    from tests.conftest import UUID_BLOB, write_toy_root
    from tests.harness.test_faults import write_solution

    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    report = tmp_path / "r.jsonl"
    argv = ["run", "--solution", "correct", "--runtime", "host", "--device", "cpu"]
    argv += ["--data-root", str(root), "--solutions-root", str(tmp_path / "solutions")]
    argv += ["--report", str(report), "--workload", UUID_BLOB, "--resume"]
    assert CliRunner().invoke(app, argv).exit_code == 0
    [written] = [json.loads(x) for x in report.read_text().splitlines()]
    assert written["schema_version"] == RESULT_SCHEMA_VERSION
    skipped = CliRunner().invoke(app, argv)
    assert "skipped" in skipped.output and len(report.read_text().splitlines()) == 1
    moved = copy.deepcopy(written)
    moved["context"]["env"] = "some-other-env"
    report.write_text(json.dumps(moved) + "\n")
    rerun = CliRunner().invoke(app, argv)
    assert rerun.exit_code == 0, rerun.output
    assert len(report.read_text().splitlines()) == 2, "--resume took another env's line as done"


def test_results_stays_standard_library_only() -> None:
    """The harness writes lines inside solution environments: no pydantic there."""
    code = "import sys, envaudit.schema.results; print('pydantic' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "False"
