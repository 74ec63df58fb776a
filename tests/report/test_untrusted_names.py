"""Names in data that become path components (a result line's definition, a solution's author
or name, a definition's op_type) cannot lead a writer out of its folder: `merge` and
`export-solutions` refuse or skip them, naming field and value, and `check-inputs` reports
them."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from envaudit.cli import app
from tests.conftest import UUID_BLOB, tree_digest, write_toy_root
from tests.harness.test_faults import write_solution

ESCAPE = "../../../../escaped"


def invoke(*argv: str) -> Result:
    return CliRunner().invoke(app, list(argv))


def merge(results: Path, out: Path, root: Path, solutions: Path) -> Result:
    """`envaudit merge RESULTS --out OUT` over this data root and solutions folder."""
    argv = ["merge", str(results), "--out", str(out), "--data-root", str(root)]
    return invoke(*argv, "--solutions-root", str(solutions))


def result_line(**changes: object) -> dict[str, object]:
    line: dict[str, object] = {
        "schema_version": 1,
        "definition": "toy_scale",
        "solution": "correct",
        "workload": {"uuid": UUID_BLOB},
        "status": "PASSED",
        "context": {"device_id": "cpu", "env": "torch-cpu"},
        "timestamp": "2026-01-01T00:00:00+00:00",
    }
    return {**line, **changes}


def layout(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A toy TraceSet root, a solutions root with one solution, and an --out folder deep
    enough that ESCAPE from any of its subfolders stays inside tmp_path."""
    root = write_toy_root(tmp_path / "data")
    write_solution(tmp_path / "solutions", "correct")
    return root, tmp_path / "solutions", tmp_path / "a" / "b" / "c" / "out"


def escaped(tmp_path: Path, out: Path) -> list[str]:
    """Files written under tmp_path but outside `out` (and outside the inputs)."""
    inputs = ("data/", "solutions/", "results.jsonl")
    return [
        rel
        for rel in tree_digest(tmp_path)
        if not rel.startswith(inputs) and not (tmp_path / rel).is_relative_to(out)
    ]


def test_merge_skips_a_line_whose_definition_is_a_path(tmp_path: Path) -> None:
    root, solutions, out = layout(tmp_path)
    lines = [result_line(), result_line(definition=ESCAPE, workload={"uuid": "w2"})]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = merge(results, out, root, solutions)
    assert escaped(tmp_path, out) == []
    assert "definition" in result.output and repr(ESCAPE) in result.output, result.output
    assert "merged 1 lines" in result.output, result.output


def test_merge_refuses_a_solution_whose_author_is_a_path(tmp_path: Path) -> None:
    root, solutions, out = layout(tmp_path)
    spec = solutions / "correct" / "solution.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "author": ESCAPE}))
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(result_line()) + "\n")
    result = merge(results, out, root, solutions)
    assert escaped(tmp_path, out) == []
    assert result.exit_code == 2, result.output  # unusable input, as compare
    assert "author" in result.output and repr(ESCAPE) in result.output, result.output
    assert str(spec) in result.output, result.output


def test_export_refuses_a_solution_whose_author_is_a_path(tmp_path: Path) -> None:
    root, solutions, out = layout(tmp_path)
    spec = solutions / "correct" / "solution.json"
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "author": ESCAPE}))
    result = invoke(
        "export-solutions", "--out", str(out), "--data-root", str(root),
        "--solutions-root", str(solutions),
    )  # fmt: skip
    assert escaped(tmp_path, out) == []
    assert not out.exists()
    assert result.exit_code == 2, result.output
    assert "author" in result.output and str(spec) in result.output, result.output


def test_export_refuses_a_definition_whose_op_type_is_a_path(tmp_path: Path) -> None:
    root, solutions, out = layout(tmp_path)
    path = root / "definitions" / "toy" / "toy_scale.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "op_type": ESCAPE}))
    result = invoke(
        "export-solutions", "--out", str(out), "--data-root", str(root),
        "--solutions-root", str(solutions),
    )  # fmt: skip
    assert escaped(tmp_path, out) == []
    assert result.exit_code == 2, result.output


def test_check_inputs_reports_names_that_are_paths(tmp_path: Path) -> None:
    root = write_toy_root(tmp_path / "data")
    path = root / "definitions" / "toy" / "toy_scale.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "op_type": ESCAPE}))
    result = invoke("check-inputs", "--data-root", str(root))
    assert result.exit_code == 1, result.output
    assert "op_type" in result.output and "path separator" in result.output, result.output


def test_merge_writes_nothing_through_a_symlink_out_of_out(tmp_path: Path) -> None:
    """A traces/ folder in --out that is a symbolic link elsewhere is not followed."""
    root, solutions, out = layout(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out.mkdir(parents=True)
    (out / "traces").symlink_to(elsewhere)
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(result_line()) + "\n")
    result = merge(results, out, root, solutions)
    assert list(elsewhere.iterdir()) == []
    assert result.exit_code == 2, result.output
    assert "traces" in result.output, result.output


def test_names_with_hidden_or_table_breaking_characters_never_reach_the_report(
    tmp_path: Path,
) -> None:
    """A bidi override, an ANSI escape or a '|' in a solution or env name: the line is skipped,
    naming the field; in a workload's free-text label they are dropped or escaped."""
    root, solutions, out = layout(tmp_path)
    label = "w\u202eevil|x\x1b[2J"
    lines = [
        result_line(workload={"uuid": UUID_BLOB, "label": label}),
        result_line(solution="correct\u202e", workload={"uuid": "w2"}),
        result_line(solution="a|b", workload={"uuid": "w3"}),
        result_line(context={"device_id": "cpu", "env": "\x1b[2Jtorch"}, workload={"uuid": "w4"}),
    ]
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = merge(results, out, root, solutions)
    assert "merged 1 lines" in result.output, result.output
    assert "U+202E" in result.output and "U+001B" in result.output and "'|'" in result.output
    for name in ("performance.md", "report.html"):
        text = (out / name).read_text()
        assert "\u202e" not in text and "\x1b" not in text, name
    assert "| wevil\\|x[2J |" in (out / "performance.md").read_text()
