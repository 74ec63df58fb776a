"""check-inputs on broken roots: each break gives a precise finding, exit 1, and no writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import BLOB_REL, UUID_BLOB, UUID_RANDOM, tree_digest

WORKLOADS = "workloads/toy/toy_scale.jsonl"
DEFINITION = "definitions/toy/toy_scale.json"


def run_check(root: Path, *extra: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["check-inputs", "--data-root", str(root), *extra])
    return result.exit_code, result.output


def edit_lines(root: Path, edit: Callable[[list[dict]], None]) -> None:
    path = root / WORKLOADS
    traces = [json.loads(line) for line in path.read_text().splitlines()]
    edit(traces)
    path.write_text("\n".join(json.dumps(t) for t in traces) + "\n")


def blob_input(traces: list[dict]) -> dict:
    return traces[0]["workload"]["inputs"]["lengths"]


def test_valid_root_is_clean(toy_root: Path) -> None:
    code, out = run_check(toy_root, "--strict")
    assert code == 0, out
    assert "1 definitions, 2 workloads, 1 tensor paths, 1 unique blobs" in out
    assert "0 problems, 0 warnings" in out


def break_definition_json(root: Path) -> None:
    (root / DEFINITION).write_text('{"name": "toy_scale", "axes": ')


def break_workload_line(root: Path) -> None:
    path = root / WORKLOADS
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1][:40] + "\n")


def remove_blob(root: Path) -> None:
    (root / BLOB_REL).unlink()


def change_blob_bytes(root: Path) -> None:
    save_file({"lengths": np.array([2, 1, 3], dtype=np.int32)}, str(root / BLOB_REL))


def truncate_blob(root: Path) -> None:
    path = root / BLOB_REL
    path.write_bytes(path.read_bytes()[:-5])


def corrupt_blob_header(root: Path) -> None:
    path = root / BLOB_REL
    data = bytearray(path.read_bytes())
    data[8:12] = b"\xff\xfe\x00["
    path.write_bytes(bytes(data))


def wrong_shape(root: Path) -> None:
    edit_lines(root, lambda t: t[0]["workload"]["axes"].update(B=4))


def wrong_dtype(root: Path) -> None:
    definition = json.loads((root / DEFINITION).read_text())
    definition["inputs"]["lengths"]["dtype"] = "int64"
    (root / DEFINITION).write_text(json.dumps(definition))


def failing_constraint(root: Path) -> None:
    edit_lines(root, lambda t: t[0]["workload"]["axes"].update(S=2))


def unknown_axis_in_workload(root: Path) -> None:
    edit_lines(root, lambda t: t[1]["workload"]["axes"].update(T=9))


def unknown_axis_in_definition(root: Path) -> None:
    definition = json.loads((root / DEFINITION).read_text())
    definition["outputs"]["out"]["shape"] = ["B", "S", "E"]
    (root / DEFINITION).write_text(json.dumps(definition))


def unreferenced_blob(root: Path) -> None:
    stray = root / "blob/workloads/toy/toy_scale/stray.safetensors"
    save_file({"x": np.zeros(2, dtype=np.float32)}, str(stray))


def dotdot_path(root: Path) -> None:
    (root.parent / "outside.safetensors").write_bytes((root / BLOB_REL).read_bytes())
    edit_lines(root, lambda t: blob_input(t).update(path="../outside.safetensors"))


def absolute_path(root: Path) -> None:
    target = str((root / BLOB_REL).resolve())
    edit_lines(root, lambda t: blob_input(t).update(path=target))


def missing_tensor_key(root: Path) -> None:
    edit_lines(root, lambda t: blob_input(t).update(tensor_key="lens"))


def wrong_definition_field_type(root: Path) -> None:
    definition = json.loads((root / DEFINITION).read_text())
    definition["tolerance"]["rule"] = "sometimes"
    (root / DEFINITION).write_text(json.dumps(definition))


def random_int_without_init(root: Path) -> None:
    definition = json.loads((root / DEFINITION).read_text())
    del definition["inputs"]["lengths"]["init"]
    (root / DEFINITION).write_text(json.dumps(definition))


def suite_names_missing_uuid(root: Path) -> None:
    suite = {"schema_version": 1, "name": "smoke", "workloads": {"toy_scale": ["nope"]}}
    (root / "suites/smoke.json").write_text(json.dumps(suite))


def inputs_larger_than_any_gpu(root: Path) -> None:
    edit_lines(root, lambda t: t[1]["workload"]["axes"].update(B=10**6, S=10**6))


# (break, finding code, strings the message must contain: file, workload, field, detail)
CASES = [
    (break_definition_json, "malformed-json", [DEFINITION, "malformed JSON"]),
    (break_workload_line, "malformed-json", [f"{WORKLOADS}:2", "malformed JSON"]),
    (remove_blob, "missing-blob", [WORKLOADS, UUID_BLOB, "inputs.lengths", "does not exist"]),
    (change_blob_bytes, "hash-mismatch", [UUID_BLOB, "inputs.lengths", "sha256 is", "records"]),
    (truncate_blob, "corrupt-blob", [UUID_BLOB, "inputs.lengths", "truncated"]),
    (corrupt_blob_header, "corrupt-blob", [UUID_BLOB, "header"]),
    (wrong_shape, "wrong-shape", [UUID_BLOB, "inputs.lengths", "[3]", "B=4"]),
    (wrong_dtype, "wrong-dtype", [UUID_BLOB, "inputs.lengths", "int32", "int64"]),
    (failing_constraint, "constraint-failed", [UUID_BLOB, "constraints.0", "(lengths <= S).all()"]),
    (unknown_axis_in_workload, "unknown-axis", [UUID_RANDOM, "axes.T"]),
    (unknown_axis_in_definition, "unknown-axis", [DEFINITION, "outputs.out.shape", "axis E"]),
    (unreferenced_blob, "unreferenced-blob", ["stray.safetensors", "no workload references"]),
    (dotdot_path, "path-escapes-root", [UUID_BLOB, "../outside.safetensors", "leaves the root"]),
    (absolute_path, "path-escapes-root", [UUID_BLOB, "is absolute"]),
    (missing_tensor_key, "missing-tensor", [UUID_BLOB, "'lens'", "has: lengths"]),
    (wrong_definition_field_type, "invalid-field", [DEFINITION, "tolerance.rule"]),
    (suite_names_missing_uuid, "unknown-workload", ["suites/smoke.json", "nope"]),
    (inputs_larger_than_any_gpu, "inputs-too-large", [UUID_RANDOM, "16000.0 GB", "any GPU"]),
]


@pytest.mark.parametrize(("breaker", "code", "needles"), CASES, ids=[c[0].__name__ for c in CASES])
def test_break_is_reported_precisely(
    toy_root: Path, breaker: Callable[[Path], None], code: str, needles: list[str]
) -> None:
    breaker(toy_root)
    before = tree_digest(toy_root)
    exit_code, out = run_check(toy_root)
    assert exit_code == 1, out
    lines = [line for line in out.splitlines() if f"[{code}]" in line]
    assert lines, f"no {code} finding in:\n{out}"
    assert any(all(n in line for n in needles) for line in lines), out
    assert tree_digest(toy_root) == before, "check-inputs modified the root"
    assert "problems" in out.splitlines()[-1]


def test_random_int_without_init_is_drawn_as_flashinfer_bench_does(toy_root: Path) -> None:
    """FlashInfer-Bench's definitions carry no init rule: a warning, not a refusal."""
    random_int_without_init(toy_root)
    code, out = run_check(toy_root)
    assert code == 0, out
    assert f"warning[random-without-init] {WORKLOADS}:2: workload {UUID_RANDOM}" in out
    assert "as FlashInfer-Bench draws it" in out
    code, _ = run_check(toy_root, "--strict")
    assert code == 1


def test_constraint_on_random_input_is_deferred(toy_root: Path) -> None:
    code, out = run_check(toy_root)
    assert code == 0
    assert "(2 deferred to the harness" in out


def test_unreadable_root_exits_2(tmp_path: Path) -> None:
    code, out = run_check(tmp_path / "missing")
    assert code == 2
    assert "not a directory" in out
    (tmp_path / "empty").mkdir()
    code, out = run_check(tmp_path / "empty")
    assert code == 2
    assert "no definitions/" in out


def test_unknown_key_is_reported_not_dropped(toy_root: Path) -> None:
    edit_lines(toy_root, lambda t: t[0]["workload"].update(colour="blue"))
    code, out = run_check(toy_root)
    assert code == 0
    assert f"warning[unknown-key] {WORKLOADS}:1: workload {UUID_BLOB}: workload.colour" in out
    code, _ = run_check(toy_root, "--strict")
    assert code == 1


def test_flashinfer_bench_root_without_extensions(toy_root: Path) -> None:
    """A plain FlashInfer-Bench root (no sha256, provenance, seed, tolerance) still checks."""
    definition = json.loads((toy_root / DEFINITION).read_text())
    for key in ("tolerance", "flops", "bytes"):
        del definition[key]
    (toy_root / DEFINITION).write_text(json.dumps(definition))

    def strip(traces: list[dict]) -> None:
        for trace in traces:
            trace["workload"].pop("seed")
        for key in ("sha256", "provenance"):
            blob_input(traces).pop(key)

    edit_lines(toy_root, strip)
    (toy_root / "suites/smoke.json").unlink()
    code, out = run_check(toy_root)
    assert code == 0, out
    assert "no-sha256" in out and "no-provenance" in out
    assert "1 tensor paths, 1 unique blobs" in out


def test_definition_filter(toy_root: Path) -> None:
    code, out = run_check(toy_root, "--definition", "toy_scale")
    assert code == 0
    code, out = run_check(toy_root, "--definition", "nope")
    assert code == 2  # a usage error, not a problem of the data
    assert "no definition named nope" in out and "toy_scale" in out


def test_json_output_names_each_finding_and_exits_as_the_text_does(toy_root: Path) -> None:
    path = toy_root / DEFINITION
    path.write_text(json.dumps({**json.loads(path.read_text()), "op_type": "../../up"}))
    code, text = run_check(toy_root)
    code_json, out = run_check(toy_root, "--json")
    answer = json.loads(out)
    assert code == code_json == 1 and answer["failed"] and answer["errors"] >= 1
    finding = answer["findings"][0]
    assert finding["path"] == DEFINITION and finding["field"] == "op_type"
    assert finding["message"] in text
