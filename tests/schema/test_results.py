"""Result files survive an interrupted run: a partial last line is stepped over, not glued to."""

from __future__ import annotations

from pathlib import Path

from envaudit.schema.results import append_line, done_keys, read_lines


def test_append_after_a_partial_line(tmp_path: Path) -> None:
    report = tmp_path / "r.jsonl"
    append_line(report, {"solution": "s", "workload": {"uuid": "a"}, "context": {}})
    with report.open("a") as handle:
        handle.write('{"solution": "s", "workl')  # a run killed mid-write
    append_line(report, {"solution": "s", "workload": {"uuid": "b"}, "context": {}})
    parsed = list(read_lines(report))
    assert [n for n, line in parsed if line is None] == [2]
    assert [line["workload"]["uuid"] for _, line in parsed if line] == ["a", "b"]
    assert done_keys(report) == {("s", "a", None, None), ("s", "b", None, None)}
