"""`envaudit compare BEFORE AFTER` on the committed FlashMLA result files (docs/results/h200/
flashmla/: three solutions, three workloads each, six alternated runs per pair) and on copies of
them changed the way a kernel PR would change them: slower, failing, a workload gone."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from envaudit.cli import app
from envaudit.report.traces import line_to_trace
from tests.conftest import REPO

FLASHMLA = REPO / "docs" / "results" / "h200" / "flashmla"
V131 = FLASHMLA / "flashmla-13.1.jsonl"
V133 = FLASHMLA / "flashmla-13.3.jsonl"
MIXED = "mla_mixed_decode_h128_ckv512_kpe64_ps64-flashmla"
VERDICTS = {
    "faster",
    "slower",
    "within noise",
    "newly failing",
    "newly passing",
    "missing",
    "still failing",
    "not timed",
    "timing flagged",
    "lost",
}
KEPT_FIGURES = {"budget_ms"}
"""A timing block's *_ms fields that are settings, not measurements (left as they are)."""


def compare(*args: str | Path) -> Result:
    return CliRunner().invoke(app, ["compare", *(str(a) for a in args)])


def compared(*args: str | Path) -> tuple[int, dict[str, Any]]:
    """(exit code, the --json answer)."""
    result = compare(*args, "--json")
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(text) for text in path.read_text().splitlines() if text.strip()]


def write(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def changed(
    tmp_path: Path, change: Callable[[dict[str, Any]], dict[str, Any] | None], name: str = "after"
) -> Path:
    """A copy of the 13.1 file with `change` applied to every line (None drops the line)."""
    kept = [new for line in read(V131) if (new := change(line)) is not None]
    return write(tmp_path / f"{name}.jsonl", kept)


def scaled(line: dict[str, Any], factor: float) -> dict[str, Any]:
    """The line as if every kernel call took `factor` times as long: each timing mode's
    measured figures (median, quartiles, IQR, extremes, mean, half-width, wall times) times
    factor, the achieved TFLOP/s and GB/s divided by it."""
    for stats in (line.get("timing") or {}).values():
        if not isinstance(stats, dict) or "median_ms" not in stats:
            continue  # clocks_after_eager, graph_error
        for name, value in stats.items():
            measured = name.endswith("_ms") or name == "median_halfwidth"
            if measured and name not in KEPT_FIGURES and isinstance(value, int | float):
                stats[name] = value * factor
    achieved = line.get("achieved") or {}
    for name, value in achieved.items():
        if isinstance(value, int | float):
            achieved[name] = value / factor
    return line


def of_solution(solution: str, change: Callable[[dict[str, Any]], Any]) -> Callable[..., Any]:
    def apply(line: dict[str, Any]) -> Any:
        return change(line) if line["solution"] == solution else line

    return apply


def failed(line: dict[str, Any]) -> dict[str, Any]:
    """The line as the harness writes a wrong result: no timing, a message."""
    for name in ("timing", "achieved"):
        line.pop(name, None)
    return {**line, "status": "INCORRECT_NUMERICAL", "message": "o: 12 of 393216 differ"}


def by_verdict(answer: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for pair in answer["pairs"]:
        found.setdefault(pair["verdict"], []).append(pair)
    return found


def check_consistent(answer: dict[str, Any], code: int) -> None:
    """Counts, summary line and exit code agree with the pairs."""
    pairs = answer["pairs"]
    counts = answer["summary"]["counts"]
    assert sum(counts.values()) == len(pairs) == answer["summary"]["pairs"]
    assert {v: len(p) for v, p in by_verdict(answer).items()} == {
        v: n for v, n in counts.items() if n
    }
    line = answer["summary"]["line"]
    assert line.startswith(f"{len(pairs)} pairs: {counts['faster']} faster, ")
    for verdict in ("slower", "within noise", "newly failing", "newly passing", "missing"):
        assert f"{counts[verdict]} {verdict}" in line
    regressions = ("slower", "newly failing", "lost", "timing flagged")
    regression = sum(counts.get(v, 0) for v in regressions) > 0
    assert code == answer["summary"]["exit_code"] == (1 if regression else 0)


# ---------------------------------------------------------------- (a) a file against itself


def test_a_file_against_itself_is_within_noise_and_exit_0() -> None:
    code, answer = compared(V131, V131)
    check_consistent(answer, code)
    assert code == 0
    raw = read(V131)
    expected = {(line["definition"], line["solution"], line["workload"]["uuid"]) for line in raw}
    assert len(answer["pairs"]) == len(expected) == 9  # 54 lines: six runs of each pair
    for pair in answer["pairs"]:
        assert pair["verdict"] == "within noise"
        assert pair["status"] == ["PASSED", "PASSED"]
        assert pair["mode"] == "graph"  # both sides have graph medians
        assert pair["ratio"] == 1.0
        low, high = pair["ci95"]
        assert low < 1.0 < high
        assert pair["env"] == ["flashmla-13.1", "flashmla-13.1"]
        assert not pair["gpu_differs"]
    assert "paired by definition, solution, env and workload uuid" in answer["notes"]


def test_the_terminal_table_and_summary_line() -> None:
    result = compare(V131, V131)
    assert result.exit_code == 0, result.output
    assert "within noise" in result.stdout
    assert (
        "9 pairs: 0 faster, 0 slower, 9 within noise, 0 newly failing, 0 newly passing,"
        " 0 missing" in result.stdout
    )
    assert "note: paired by definition, solution, env and workload uuid" in result.stdout


def test_a_report_folder_is_read_through_its_results_jsonl(tmp_path: Path) -> None:
    (tmp_path / "report").mkdir()
    write(tmp_path / "report" / "results.jsonl", read(V131))
    code, answer = compared(V131, tmp_path / "report")
    assert code == 0
    assert {p["verdict"] for p in answer["pairs"]} == {"within noise"}
    assert answer["after"] == str(tmp_path / "report" / "results.jsonl")


def test_flashinfer_bench_traces_are_read_as_merge_reads_them(tmp_path: Path) -> None:
    """Traces keep one latency per line (the graph median here), which import reads as an
    eager median: traces compare with traces. They name no card, so two of them are compared
    as runs on two cards of the model (the card-to-card floor): 10% is within that noise,
    30% is not."""
    traces = [line_to_trace(line, {}, None) for line in read(V131)]
    before = write(tmp_path / "before.jsonl", traces)
    within = [line_to_trace(scaled(line, 1.10), {}, None) for line in read(V131)]
    code, answer = compared(before, write(tmp_path / "within.jsonl", within))
    assert code == 0 and {p["verdict"] for p in answer["pairs"]} == {"within noise"}
    slower = [line_to_trace(scaled(line, 1.30), {}, None) for line in read(V131)]
    after = write(tmp_path / "after.jsonl", slower)
    code, answer = compared(before, before)
    assert code == 0 and len(answer["pairs"]) == 9
    assert {(p["verdict"], p["mode"]) for p in answer["pairs"]} == {("within noise", "eager")}
    code, answer = compared(before, after)
    assert code == 1
    assert {p["verdict"] for p in answer["pairs"]} == {"slower"}
    for pair in answer["pairs"]:
        assert pair["ratio"] == pytest.approx(1.30)


# ---------------------------------------------------------------- (b) slower, faster, threshold


def test_a_five_percent_regression_of_one_solution_is_slower_and_exit_1(tmp_path: Path) -> None:
    after = changed(tmp_path, of_solution(MIXED, lambda line: scaled(line, 1.05)))
    code, answer = compared(V131, after)
    check_consistent(answer, code)
    assert code == 1
    verdicts = by_verdict(answer)
    assert {p["solution"] for p in verdicts["slower"]} == {MIXED}
    # two of its three workloads; the six runs of dev-b128-q2-short-long scatter 1.9% on each
    # side, wider than the 1.6% floor, and the interval widens with them as the report's does
    assert sorted(p["label"] for p in verdicts["slower"]) == ["dev-b64-q1-ctx64-32k", "smoke-b3-q2"]
    [noisy] = [p for p in verdicts["within noise"] if p["solution"] == MIXED]
    assert noisy["label"] == "dev-b128-q2-short-long" and noisy["ci95"][0] < 1.0
    assert len(verdicts["within noise"]) == 7  # and the other two solutions, untouched
    for pair in [*verdicts["slower"], noisy]:
        assert pair["ratio"] == pytest.approx(1.05)
        assert pair["median_ms"][1] == pytest.approx(pair["median_ms"][0] * 1.05)
    for pair in verdicts["slower"]:
        assert pair["ci95"][0] > 1.0
    assert answer["pairs"][0]["verdict"] == "slower"  # regressions first
    [geo] = [g for g in answer["geomeans"] if g["solution"] == MIXED]
    assert geo["ratio"] == pytest.approx(1.05) and geo["verdict"] == "slower"


def test_the_threshold_asks_for_a_change_beyond_noise_and_beyond_it(tmp_path: Path) -> None:
    """One run per side: the interval is about +-4.5% (run-to-run noise); with --threshold 2 a
    5% regression is not flagged, a 10% one is."""
    five = changed(tmp_path, of_solution(MIXED, lambda line: scaled(line, 1.05)), "five")
    code, answer = compared(V131, five, "--threshold", "2")
    assert code == 0
    assert {p["verdict"] for p in answer["pairs"]} == {"within noise"}
    assert answer["threshold_pct"] == 2.0
    ten = changed(tmp_path, of_solution(MIXED, lambda line: scaled(line, 1.10)), "ten")
    code, answer = compared(V131, ten, "--threshold", "2")
    assert code == 1
    assert all(p["ci95"][0] > 1.02 for p in by_verdict(answer)["slower"])


def test_faster_is_no_regression(tmp_path: Path) -> None:
    after = changed(tmp_path, of_solution(MIXED, lambda line: scaled(line, 0.94)))
    code, answer = compared(V131, after)
    check_consistent(answer, code)
    assert code == 0
    assert len(by_verdict(answer)["faster"]) == 3


def flagged(line: dict[str, Any]) -> dict[str, Any]:
    """The line as the judge writes one whose clock disagreed with the reported samples."""
    line["timing"]["flags"] = [
        "graph: the judge's clock read 4.1 ms over 3 batches, 0.3 ms reported"
    ]
    return line


def test_a_flagged_after_line_is_a_regression_however_fast(tmp_path: Path) -> None:
    """A line whose time the judge does not trust is no speed-up: its ratio is shown, its verdict
    is "timing flagged" and the command exits 1; a flag on the before side is a note."""
    after = changed(tmp_path, of_solution(MIXED, lambda line: flagged(scaled(line, 0.5))))
    code, answer = compared(V131, after)
    check_consistent(answer, code)
    assert code == 1
    pairs = by_verdict(answer)["timing flagged"]
    assert len(pairs) == 3 and "faster" not in by_verdict(answer)
    assert all(p["flags"][1] and not p["flags"][0] and p["ratio"] < 0.6 for p in pairs)
    text = compare(V131, after, "--markdown")
    assert text.exit_code == 1 and "| timing flagged: graph: the judge's clock" in text.output
    code, answer = compared(after, V131)
    check_consistent(answer, code)
    assert "timing flagged" not in by_verdict(answer)
    assert all(
        any(n.startswith("before's timing was flagged") for n in p["notes"])
        for p in answer["pairs"]
        if p["solution"] == MIXED
    )


# ---------------------------------------------------------------- (c) newly failing, passing


def test_a_lost_passed_is_newly_failing_and_exit_1(tmp_path: Path) -> None:
    target = read(V131)[0]["workload"]["uuid"]

    def one_fails(line: dict[str, Any]) -> dict[str, Any]:
        hit = line["solution"] == MIXED and line["workload"]["uuid"] == target
        return failed(line) if hit else line

    after = changed(tmp_path, one_fails)
    code, answer = compared(V131, after)
    check_consistent(answer, code)
    assert code == 1
    [pair] = by_verdict(answer)["newly failing"]
    assert (pair["solution"], pair["workload"]) == (MIXED, target)
    assert pair["status"] == ["PASSED", "INCORRECT_NUMERICAL"]
    assert pair["ratio"] is None and pair["mode"] is None
    code, answer = compared(after, V131)  # the other way round
    assert code == 0
    assert len(by_verdict(answer)["newly passing"]) == 1


def test_failing_on_both_sides_is_no_regression(tmp_path: Path) -> None:
    side = changed(tmp_path, of_solution(MIXED, failed))
    code, answer = compared(side, side)
    check_consistent(answer, code)
    assert code == 0
    assert len(by_verdict(answer)["still failing"]) == 3
    assert "3 still failing" in answer["summary"]["line"]


# ---------------------------------------------------------------- (d) missing


def test_a_lost_pass_is_a_regression_and_a_new_pair_is_missing(tmp_path: Path) -> None:
    """A gate must not pass because a passing kernel stopped being run: a PASSED line with no
    line after is "lost", exit 1; a pair only after (or a failing one gone) is "missing"."""
    target = read(V131)[0]["workload"]["uuid"]

    def drop(line: dict[str, Any]) -> dict[str, Any] | None:
        gone = line["solution"] == MIXED and line["workload"]["uuid"] == target
        return None if gone else line

    after = changed(tmp_path, drop)
    code, answer = compared(V131, after)
    check_consistent(answer, code)
    assert code == 1
    [pair] = by_verdict(answer)["lost"]
    assert pair["only_in"] == "before"
    assert pair["status"] == ["PASSED", None]
    code, answer = compared(after, V131)
    check_consistent(answer, code)
    assert code == 0 and by_verdict(answer)["missing"][0]["only_in"] == "after"
    failing = changed(tmp_path, of_solution(MIXED, failed), name="failing")
    code, answer = compared(failing, changed(tmp_path, drop, name="dropped"))
    check_consistent(answer, code)
    assert [p["status"] for p in by_verdict(answer)["missing"]] == [["INCORRECT_NUMERICAL", None]]


def test_a_renamed_env_loses_every_pass_and_says_how_to_pair(tmp_path: Path) -> None:
    renamed = changed(tmp_path, lambda line: {**line, "context": {**line["context"], "env": "x"}})
    code, answer = compared(V131, renamed)
    check_consistent(answer, code)
    assert code == 1 and len(by_verdict(answer)["lost"]) == 9
    assert any("--across-envs pairs them" in note for note in answer["notes"])


# ---------------------------------------------------------------- (e) the outputs


@pytest.fixture
def mixed_change(tmp_path: Path) -> Path:
    """After: the mixed-decode solution 10% slower on one workload and failing on another,
    one sparse-decode workload gone."""
    workloads = sorted(
        {line["workload"]["uuid"] for line in read(V131) if line["solution"] == MIXED}
    )
    gone = next(line["workload"]["uuid"] for line in read(V131) if line["solution"] != MIXED)

    def change(line: dict[str, Any]) -> dict[str, Any] | None:
        uuid = line["workload"]["uuid"]
        if uuid == gone:
            return None
        if line["solution"] == MIXED and uuid == workloads[0]:
            return scaled(line, 1.10)
        if line["solution"] == MIXED and uuid == workloads[1]:
            return failed(line)
        return line

    return changed(tmp_path, change)


def test_json_answer(mixed_change: Path) -> None:
    code, answer = compared(V131, mixed_change)
    check_consistent(answer, code)
    assert code == 1
    counts = answer["summary"]["counts"]
    assert (counts["slower"], counts["newly failing"], counts["lost"]) == (1, 1, 1)
    assert counts["within noise"] == 6
    assert answer["summary"]["regression"] is True
    assert [p["verdict"] for p in answer["pairs"][:3]] == ["newly failing", "lost", "slower"]
    for pair in answer["pairs"]:
        assert set(pair) >= {"definition", "solution", "workload", "env", "status", "verdict"}
        assert set(pair) >= {"only_in", "mode", "median_ms", "ratio", "ci95", "gpu_differs"}


def test_markdown_table(mixed_change: Path) -> None:
    result = compare(V131, mixed_change, "--markdown")
    assert result.exit_code == 1, result.output
    text = result.stdout
    assert text.startswith("### envaudit compare: 1 slower, 1 newly failing, 1 lost\n")
    pairs, geomeans = text.split("\n\n| ")[1:]
    rows = ["| " + row for row in pairs.splitlines()[:1]] + pairs.splitlines()[2:]
    assert rows[0].startswith("| verdict | solution | workload |")
    assert len(rows) == 1 + 9  # the header and one row per pair
    assert geomeans.startswith("solution | env | workloads | geometric mean after/before")
    assert len(geomeans.strip().splitlines()) == 2 + 3  # one per solution with a timed pair
    assert all(row.count(" | ") == rows[0].count(" | ") for row in rows)
    assert "**9 pairs: 0 faster, 1 slower, 6 within noise, 1 newly failing," in text
    assert "| lost (PASSED before, no line after) |" in text


def test_junit_file(tmp_path: Path, mixed_change: Path) -> None:
    junit = tmp_path / "compare.xml"
    result = compare(V131, mixed_change, "--junit", junit)
    assert result.exit_code == 1, result.output
    root = ET.parse(junit).getroot()
    cases = root.findall("./testsuite/testcase")
    assert len(cases) == 9
    failures = root.findall("./testsuite/testcase/failure")
    assert sorted(f.get("type", "") for f in failures) == ["lost", "newly failing", "slower"]
    assert len([c for c in cases if c.find("skipped") is not None]) == 0
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("9", "3", "0")
    assert not list(tmp_path.glob(".*compare.xml*"))  # no temporary file left behind


def test_junit_beside_json_and_the_outputs_exclusive(tmp_path: Path) -> None:
    junit = tmp_path / "self.xml"
    code, answer = compared(V131, V131, "--junit", junit)
    assert code == 0
    root = ET.parse(junit).getroot()
    assert len(root.findall(".//testcase")) == len(answer["pairs"])
    assert root.findall(".//failure") == [] and root.findall(".//skipped") == []
    result = compare(V131, V131, "--json", "--markdown")
    assert result.exit_code == 2
    assert "give one" in result.output


# ---------------------------------------------------------------- (f) unusable input


def test_unusable_inputs_exit_2_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "empty-folder").mkdir()
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\xff\xfe" * 10)
    write(tmp_path / "not-lines.jsonl", [{"name": "a definition, say"}])
    (tmp_path / "text.jsonl").write_text("not json at all\n")
    cases = {
        tmp_path / "absent.jsonl": "no such file",
        tmp_path / "empty-folder": "a folder without results.jsonl",
        tmp_path / "binary.jsonl": "binary.jsonl",
        tmp_path / "not-lines.jsonl": "holds no result line",
        tmp_path / "text.jsonl": "holds no result line",
        FLASHMLA / "flashmla-13.1.distributions.jsonl": "holds no result line",
    }
    for path, why in cases.items():
        for argv in ((path, V131), (V131, path)):
            result = compare(*argv)
            assert result.exit_code == 2, (path, result.output)
            assert str(path) in result.stderr, result.stderr
            assert why in result.stderr
            assert "hint:" in result.stderr


def test_hostile_files_are_refused_in_bounded_time(tmp_path: Path) -> None:
    """A device, a FIFO (read to the end, or blocking forever, before merge's reader refused
    them), JSON nested past the parser, a report folder whose results.jsonl is a folder."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "report" / "results.jsonl").mkdir(parents=True)
    for path in ("/dev/zero", tmp_path / "fifo", tmp_path / "deep.jsonl", tmp_path / "report"):
        done = subprocess.run(
            [sys.executable, "-m", "envaudit", "compare", str(path), str(V131)],
            capture_output=True, text=True, timeout=120, cwd=REPO,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert str(path) in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_bad_options_exit_2(tmp_path: Path) -> None:
    for threshold in ("-1", "nan", "100"):
        result = compare(V131, V131, "--threshold", threshold)
        assert result.exit_code == 2, result.output
        assert "--threshold" in result.output
    (tmp_path / "a-file").write_text("")
    result = compare(V131, V131, "--junit", tmp_path / "a-file" / "compare.xml")
    assert result.exit_code == 2
    assert "compare.xml" in result.stderr


def test_across_envs_refuses_a_side_with_two_envs_of_one_pair(tmp_path: Path) -> None:
    both = write(tmp_path / "both.jsonl", read(V131) + read(V133))
    result = compare(both, V133, "--across-envs")
    assert result.exit_code == 2
    assert str(both) in result.stderr and "flashmla-13.1, flashmla-13.3" in result.stderr


# ---------------------------------------------------------------- (g) FlashMLA 13.1 vs 13.3


def newest_graph_medians(path: Path) -> dict[tuple[str, str], float]:
    """(solution, workload) -> the graph median of its newest line, read here without
    envaudit: the six runs of each pair carry distinct timestamps."""
    newest: dict[tuple[str, str], dict[str, Any]] = {}
    for line in read(path):
        key = (line["solution"], line["workload"]["uuid"])
        if key not in newest or line["timestamp"] >= newest[key]["timestamp"]:
            newest[key] = line
    return {k: line["timing"]["graph"]["median_ms"] for k, line in newest.items()}


def scatter(path: Path, key: tuple[str, str]) -> float:
    """The sample variance of the log graph medians of a pair's runs in a file."""
    logs = [
        math.log(line["timing"]["graph"]["median_ms"])
        for line in read(path)
        if (line["solution"], line["workload"]["uuid"]) == key
    ]
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)


def test_flashmla_131_against_133_pairs_only_across_envs() -> None:
    code, answer = compared(V131, V133)
    check_consistent(answer, code)
    assert code == 1  # every pass of 13.1 is lost unless the envs are paired
    assert {(p["verdict"], p["only_in"]) for p in answer["pairs"]} == {
        ("lost", "before"),
        ("missing", "after"),
    }
    assert any("--across-envs" in note for note in answer["notes"])

    code, answer = compared(V131, V133, "--across-envs")
    check_consistent(answer, code)
    then, now = newest_graph_medians(V131), newest_graph_medians(V133)
    assert len(answer["pairs"]) == len(then) == len(now) == 9
    for pair in answer["pairs"]:
        key = (pair["solution"], pair["workload"])
        assert pair["env"] == ["flashmla-13.1", "flashmla-13.3"]
        assert pair["status"] == ["PASSED", "PASSED"]
        assert pair["mode"] == "graph"
        assert pair["median_ms"] == [then[key], now[key]]
        assert pair["ratio"] == pytest.approx(now[key] / then[key])
        low, high = pair["ci95"]
        assert low < pair["ratio"] < high
        # the interval is the run-to-run one, 1.6% a side on one card, or the side's six
        # runs' own scatter where wider (the within-run part is small beside them)
        spread = [max(0.016**2, scatter(path, key)) for path in (V131, V133)]
        assert math.log(high / low) / 2 == pytest.approx(1.96 * math.sqrt(sum(spread)), rel=0.05)
        expected = "slower" if low > 1 else "faster" if high < 1 else "within noise"
        assert pair["verdict"] == expected


def test_different_gpu_models_are_compared_and_flagged(tmp_path: Path) -> None:
    def elsewhere(line: dict[str, Any]) -> dict[str, Any]:
        line["environment"]["gpu_name"] = "NVIDIA B200"
        return line

    after = changed(tmp_path, elsewhere)
    code, answer = compared(V131, after)
    assert code == 0
    assert all(p["gpu_differs"] and p["verdict"] == "within noise" for p in answer["pairs"])
    assert any("different GPU models" in note and "NVIDIA B200" in note for note in answer["notes"])
    result = compare(V131, after, "--markdown")
    assert "within noise (GPU differs)" in result.stdout


def test_lines_of_a_newer_schema_version_are_refused_unless_asked_for(tmp_path: Path) -> None:
    """A CI gate fed a file written by a newer envaudit must not pass on what it cannot read:
    compare and merge exit 2 naming FILE:LINE, and read it as read only when asked."""
    newer = changed(tmp_path, lambda line: {**line, "schema_version": 3})
    result = compare(V131, newer)
    assert result.exit_code == 2, result.output
    assert f"{newer}:1" in result.output and "--accept-newer-schema" in result.output
    result = compare(V131, newer, "--accept-newer-schema")
    assert result.exit_code == 0, result.output
    merged = CliRunner().invoke(app, ["merge", str(newer), "--out", str(tmp_path / "r")])
    assert merged.exit_code == 2 and "newer than this envaudit reads" in merged.output
    assert not (tmp_path / "r").exists()
