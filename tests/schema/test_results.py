"""Result files survive an interrupted run: a partial last line is stepped over, not glued to."""

from __future__ import annotations

from pathlib import Path

from envaudit.schema.results import (
    LineKey,
    append_line,
    done_keys,
    instant,
    line_key,
    newest_per_key,
    read_lines,
)


def kept_lines(report: Path) -> dict[LineKey, dict]:
    """The raw line that counts per key (schema.results' rule), for lines too bare to validate."""
    lines = (line for _, line in read_lines(report) if line is not None)
    return newest_per_key(lines, line_key, lambda line: instant(line.get("timestamp")))


def test_append_after_a_partial_line(tmp_path: Path) -> None:
    report = tmp_path / "r.jsonl"
    append_line(report, {"solution": "s", "workload": {"uuid": "a"}, "context": {}})
    with report.open("a") as handle:
        handle.write('{"solution": "s", "workl')  # a run killed mid-write
    append_line(report, {"solution": "s", "workload": {"uuid": "b"}, "context": {}})
    parsed = list(read_lines(report))
    assert [n for n, line in parsed if line is None] == [2]
    assert [line["workload"]["uuid"] for _, line in parsed if line] == ["a", "b"]
    assert done_keys(report) == {("s", "a", "", "", "cpu"), ("s", "b", "", "", "cpu")}


def test_the_line_that_counts_for_a_key(tmp_path: Path) -> None:
    """Newest timestamp as an instant (offset-less is UTC, undated is oldest); tie: later line."""
    report = tmp_path / "r.jsonl"

    def line(uuid: str, status: str, stamp: object) -> dict[str, object]:
        context = {"env": "e", "closure_hash": "c", "device_id": "cpu"}
        return {"solution": "s", "workload": {"uuid": uuid}, "context": context,
                "status": status, "timestamp": stamp}  # fmt: skip

    rows = [
        line("a", "old", "2026-01-01T12:00:00+00:00"),
        line("a", "new", "2026-01-01T13:30:00+01:00"),  # 12:30 UTC
        line("a", "undated", None),
        line("b", "first", "2026-01-01T12:00:00"),
        line("b", "tie", "2026-01-01T12:00:00+00:00"),
        line("c", "unparsable", "yesterday"),
        line("c", "dated", "1999-01-01T00:00:00Z"),
    ]
    for row in rows:
        append_line(report, row)
    kept = kept_lines(report)
    assert {key[1]: found["status"] for key, found in kept.items()} == {
        "a": "new",
        "b": "tie",
        "c": "dated",
    }
    assert list(kept) == [("s", u, "e", "c", "cpu") for u in "abc"]


def test_worker_logs_never_share_a_name(tmp_path: Path) -> None:
    """Two workers of one number in one second and one process (an audit over two devices)
    get two logs; a crash line can only quote its own worker's log."""
    from envaudit.runtime.supervision.supervisor import unique_log

    names = {unique_log(tmp_path / "logs", 1) for _ in range(5)}
    assert len(names) == 5 and all(p.is_file() for p in names)
