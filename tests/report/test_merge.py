"""merge: dedup, conflicts, GPUs and environments kept apart, bad input reported by line."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from envaudit.report.choice import preferred_solutions
from envaudit.report.intervals import CARD_TO_CARD_SD, Z95
from envaudit.report.merge import merge_files
from envaudit.report.summary import SolutionInfo, build_summary
from envaudit.schema.summary import SolutionBlock, Summary

GPU_A, GPU_A2, GPU_B = (
    "GPU-aaaaaaaa-0000-0000-0000-000000000000",
    "GPU-aaaaaaa2-0000-0000-0000-000000000000",  # a second card of GPU_A's model
    "GPU-bbbbbbbb-0000-0000-0000-000000000000",
)
NAMES = {GPU_A: "NVIDIA H100 80GB HBM3", GPU_A2: "NVIDIA H100 80GB HBM3", GPU_B: "NVIDIA H200"}
MODEL_A, MODEL_B = "NVIDIA H100 80GB HBM3, driver 580.159.04", "NVIDIA H200, driver 580.159.04"
SOLUTIONS = {
    "d-torch": SolutionInfo("d-torch", "d", "me", "torch-2.11-cu130", True),
    "d-fast": SolutionInfo("d-fast", "d", "me", "fast-env", False),
}


def line(
    solution: str,
    workload: str,
    ms: float,
    *,
    status: str = "PASSED",
    gpu: str = GPU_A,
    env: str = "torch-2.11-cu130",
    closure: str | None = None,
    stamp: str = "2026-11-30T10:00:00+00:00",
    revision: str = "r1",
) -> dict[str, Any]:
    timing = {"eager": {"median_ms": ms}, "graph": {"median_ms": ms * 0.9}}
    return {
        "schema_version": 1,
        "definition": "d",
        "workload": {"uuid": workload, "label": workload, "axes": {}},
        "solution": solution,
        "solution_hash": revision,
        "status": status,
        "message": "",
        "timing": timing if status == "PASSED" else None,
        "context": {"runtime": "host", "env": env, "closure_hash": closure, "device_id": gpu},
        "environment": {
            "gpu_uuid": gpu,
            "gpu_name": NAMES[gpu],
            "driver": "580.159.04",
            "harness_hash": "h",
        },
        "timestamp": stamp,
    }


def write(path: Path, lines: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + tail)
    return path


def summarize(paths: list[Path]) -> tuple[Any, Summary]:
    merged = merge_files(paths)
    return merged, build_summary(merged, SOLUTIONS, {"d": {"op_type": "t"}})


def entry(summary: Summary, solution: str, model: str = MODEL_A) -> SolutionBlock:
    """The first block of `solution` on `model`."""
    blocks = summary.definitions["d"].devices[model].solutions
    return next(s for s in blocks if s.solution == solution)


def test_repeats_keep_the_newest_and_are_counted(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [line("d-torch", "w1", 2.0)])
    b = write(tmp_path / "b.jsonl", [line("d-torch", "w1", 1.0, stamp="2026-11-30T11:00:00+00:00")])
    merged, _ = summarize([a, b])
    assert len(merged.lines) == 1 and merged.repeats == 1 and not merged.conflicts
    assert merged.lines[0].median("eager") == 1.0


def test_conflicts_are_reported_never_silently_dropped(tmp_path: Path) -> None:
    a = write(tmp_path / "a.jsonl", [line("d-fast", "w1", 1.0)])
    b = write(
        tmp_path / "b.jsonl",
        [
            line(
                "d-fast", "w1", 1.0, status="INCORRECT_NUMERICAL", stamp="2026-11-30T12:00:00+00:00"
            )
        ],
    )
    merged, summary = summarize([a, b])
    assert len(merged.conflicts) == 1
    conflict = summary.conflicts[0]
    assert conflict.kept.status == "INCORRECT_NUMERICAL"
    assert conflict.dropped.status == "PASSED"
    assert f"{a}:1" in conflict.text and f"{b}:1" in conflict.text


def test_gpus_and_environments_are_never_mixed(tmp_path: Path) -> None:
    lines = [
        line("d-torch", "w1", 2.0),
        line("d-fast", "w1", 1.0),  # 2x on GPU A
        line("d-torch", "w1", 4.0, gpu=GPU_B),
        line("d-fast", "w1", 1.0, gpu=GPU_B),  # 4x on GPU B
        line("d-fast", "w1", 0.5, env="other-env", closure="c" * 64),  # same GPU, other env
    ]
    merged, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    assert len(merged.lines) == 5
    devices = summary.definitions["d"].devices
    assert set(devices) == {MODEL_A, MODEL_B}
    on_a = {(s.solution, s.env): s for s in devices[MODEL_A].solutions}
    assert set(on_a) == {
        ("d-torch", "torch-2.11-cu130"),
        ("d-fast", "torch-2.11-cu130"),
        ("d-fast", "other-env"),
    }
    assert on_a[("d-fast", "torch-2.11-cu130")].geomean_speedup.primary == 2.0
    assert on_a[("d-fast", "other-env")].geomean_speedup.primary == 4.0
    on_b = {s.solution: s for s in devices[MODEL_B].solutions}
    assert on_b["d-fast"].geomean_speedup.primary == 4.0
    preferred = preferred_solutions(summary).choices["d"]
    choice, runner_up = preferred[MODEL_A].choice, preferred[MODEL_A].runner_up
    assert choice is not None and choice.env == "other-env"
    assert runner_up is not None and runner_up.solution == "d-fast"


def test_cards_of_one_model_are_one_group_naming_each_card(tmp_path: Path) -> None:
    later = "2026-11-30T12:00:00+00:00"
    lines = [
        line("d-torch", "w1", 2.0),
        line("d-torch", "w2", 2.0),
        line("d-fast", "w1", 1.0),
        line("d-fast", "w2", 1.0, gpu=GPU_A2),  # the re-run on a second card adds w2
        line("d-fast", "w1", 0.5, gpu=GPU_A2, stamp=later),  # and the newest w1 counts
    ]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    assert set(summary.definitions["d"].devices) == {MODEL_A}
    assert summary.devices[MODEL_A].uuids == [GPU_A2, GPU_A]
    fast = entry(summary, "d-fast")
    assert fast.gpus == [GPU_A2]
    rows = {r.uuid: r for r in fast.per_workload}
    assert rows["w1"].device == GPU_A2 and rows["w1"].speedup_eager == 4.0
    assert rows["w2"].speedup_eager == 2.0 and fast.workloads.total == 2


def test_a_line_is_compared_with_the_baseline_line_the_report_prints(tmp_path: Path) -> None:
    """One comparison rule: the speedup divides the baseline's newest line on the GPU model,
    the one printed beside it and named by its results line, even where an older baseline
    line ran on the solution's own card; two cards widen the interval by the card-to-card
    floor instead."""
    later = "2026-11-30T12:00:00+00:00"
    lines = [
        line("d-torch", "w1", 3.0, gpu=GPU_A2),
        line("d-torch", "w1", 2.0, stamp=later),  # newer, on the other card
        line("d-torch", "w2", 2.0, stamp=later),
        line("d-fast", "w1", 1.0, gpu=GPU_A2),
        line("d-fast", "w2", 1.0, gpu=GPU_A2),
    ]
    path = write(tmp_path / "r.jsonl", lines)
    _, summary = summarize([path])
    fast = entry(summary, "d-fast")
    rows = {r.uuid: r for r in fast.per_workload}
    assert rows["w1"].speedup_eager == 2.0 and rows["w2"].speedup_eager == 2.0
    torch = entry(summary, "d-torch")
    printed = {r.uuid: r.results_line for r in torch.per_workload}
    assert rows["w1"].baseline_results_line == printed["w1"]
    assert rows["w1"].baseline_device != rows["w1"].device
    assert rows["w1"].speedup_ci95 is not None
    low, high = rows["w1"].speedup_ci95
    # graph figures of two cards: the card-to-card floor for the solution's one run, and for
    # the baseline the wider scatter of its two runs (3.0 and 2.0 ms: log 1.5 apart)
    floor = CARD_TO_CARD_SD["cuda_graph"]
    observed = math.log(1.5) ** 2 / 2
    half = Z95 * math.sqrt(floor**2 + max(floor**2, observed))
    assert math.isclose(math.log(high / low) / 2, half, rel_tol=1e-3)
    assert [r.speedup_eager for r in torch.per_workload] == [1.0, 1.0]


def test_preference_needs_every_workload_passed(tmp_path: Path) -> None:
    lines = [
        line("d-torch", "w1", 2.0),
        line("d-torch", "w2", 2.0),
        line("d-fast", "w1", 0.1),
        line("d-fast", "w2", 0.1, status="TIMEOUT"),
    ]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    choice = preferred_solutions(summary).choices["d"][MODEL_A]
    assert choice.choice is not None and choice.choice.solution == "d-torch"
    assert choice.runner_up is None
    fast = entry(summary, "d-fast")
    assert fast.workloads.model_dump() == {"total": 2, "passed": 1, "failed": {"TIMEOUT": 1}}
    lines = [line("d-torch", "w1", 2.0, status="RUNTIME_ERROR")]
    _, summary = summarize([write(tmp_path / "none.jsonl", lines)])
    assert preferred_solutions(summary).choices["d"][MODEL_A].choice is None


def test_truncated_last_line_is_reported_and_the_rest_merged(tmp_path: Path) -> None:
    good = line("d-torch", "w1", 2.0)
    path = write(tmp_path / "cut.jsonl", [good], tail=json.dumps(line("d-fast", "w1", 1.0))[:40])
    merged, _ = summarize([path])
    assert len(merged.lines) == 1
    assert [f.render() for f in merged.findings] == [
        f"{path}:2: truncated last line (an interrupted run?); skipped"
    ]


def test_empty_input_and_bad_lines_are_reported_with_line_numbers(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    old = line("d-torch", "w1", 2.0)
    old["schema_version"] = 0
    unknown = line("d-fast", "w1", 1.0, status="EXPLODED")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "not json\n"
        + json.dumps(old)
        + "\n"
        + json.dumps({"schema_version": 0, "solution": "x"})
        + "\n"
        + json.dumps(unknown)
        + "\n"
        + "[1, 2]\n"
    )
    merged, summary = summarize([empty, mixed])
    rendered = [f.render() for f in merged.findings]
    assert rendered[0] == f"{empty}: empty input: no result lines"
    assert rendered[1].startswith(f"{mixed}:1: not JSON")
    assert (
        rendered[2]
        == f"{mixed}:2: result schema version 0 (this envaudit reads 1 to 2); merged as read"
    )
    assert (
        rendered[3].startswith(f"{mixed}:3: result schema version 0") and "skipped" in rendered[3]
    )
    assert rendered[4] == f"{mixed}:4: unknown status 'EXPLODED'; merged, counted as not passed"
    assert rendered[5] == f"{mixed}:5: not a JSON object; skipped"
    assert {ln.solution for ln in merged.lines} == {"d-torch", "d-fast"}
    assert entry(summary, "d-fast").workloads.failed == {"EXPLODED": 1}


def test_lines_measured_outside_the_declared_env_are_marked(tmp_path: Path) -> None:
    from envaudit.report.markdown import render_markdown

    outside = line("d-fast", "w1", 1.0)
    outside["context"]["env_check"] = {
        "matches": False,
        "python": None,
        "missing": ["tilelang==0.1.15"],
        "different": ["tilelang 0.1.15 -> 0.1.12"],
    }
    inside = line("d-torch", "w1", 2.0)
    inside["context"]["env_check"] = {"matches": True, "missing": [], "different": []}
    _, summary = summarize([write(tmp_path / "r.jsonl", [outside, inside])])
    checks = [entry(summary, name).declared_env_check for name in ("d-fast", "d-torch")]
    assert [c.matches if c is not None else None for c in checks] == [False, True]
    text = render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")
    assert "not the declared env: missing tilelang==0.1.15; tilelang 0.1.15 -> 0.1.12" in text


def test_same_key_keeps_the_newest_instant_whatever_the_offset_or_order(tmp_path: Path) -> None:
    """Timestamps are compared as instants: 12:00+02:00 is older than 11:00Z."""
    east = line("d-torch", "w1", 2.0, stamp="2026-11-30T12:00:00+02:00")  # 10:00 UTC
    utc = line("d-torch", "w1", 1.0, stamp="2026-11-30T11:00:00Z")
    a, b = write(tmp_path / "a.jsonl", [east]), write(tmp_path / "b.jsonl", [utc])
    for order in ([a, b], [b, a]):
        merged, _ = summarize(order)
        assert merged.repeats == 1
        assert [ln.median("eager") for ln in merged.lines] == [1.0]


def test_a_line_without_a_timestamp_is_older_than_any_dated_line(tmp_path: Path) -> None:
    undated = line("d-fast", "w1", 3.0, status="RUNTIME_ERROR")
    del undated["timestamp"]
    garbled = line("d-fast", "w1", 4.0, status="TIMEOUT", stamp="yesterday")
    dated = line("d-fast", "w1", 1.0, stamp="2026-01-01T00:00:00+00:00")
    for lines in ([undated, garbled, dated], [dated, garbled, undated]):
        merged, _ = summarize([write(tmp_path / "r.jsonl", lines)])
        assert [ln.status for ln in merged.lines] == ["PASSED"]
        assert {c.dropped.status for c in merged.conflicts} == {"RUNTIME_ERROR", "TIMEOUT"}


def test_equal_timestamps_keep_the_line_read_last(tmp_path: Path) -> None:
    """Ties go to the later file on the command line, then the later line in a file."""
    first = line("d-fast", "w1", 1.0, stamp="2026-11-30T10:00:00+00:00")
    same_instant = line("d-fast", "w1", 2.0, stamp="2026-11-30T11:00:00+01:00")
    a, b = write(tmp_path / "a.jsonl", [first]), write(tmp_path / "b.jsonl", [same_instant])
    merged, _ = summarize([a, b])
    assert [ln.source for ln in merged.lines] == [f"{b}:1"]
    merged, _ = summarize([b, a])
    assert [ln.source for ln in merged.lines] == [f"{a}:1"]
    both = write(tmp_path / "both.jsonl", [same_instant, first])
    merged, _ = summarize([both])
    assert [ln.source for ln in merged.lines] == [f"{both}:2"]


def test_a_solution_run_in_two_envs_is_compared_by_the_one_rule(tmp_path: Path) -> None:
    """The newest line of each env per workload, by the one comparison rule (the floor,
    widened by the repeats' scatter where it is wider: the repeats merge drops from `lines`
    still count); the declared env is the numerator. One run per env is compared too (the
    floor stands in for the scatter it cannot show); one env only is not."""
    from envaudit.report.markdown import render_markdown

    rounds = []
    for i, (declared_ms, other_ms) in enumerate([(0.80, 1.0), (0.81, 1.01), (0.80, 0.99)]):
        stamp = f"2026-11-30T1{i}:00:00+00:00"
        rounds.append(line("d-fast", "w1", declared_ms, env="fast-env", stamp=stamp))
        rounds.append(line("d-fast", "w1", other_ms, env="slow-env", stamp=stamp))
    rounds.append(line("d-fast", "w2", 1.0, env="fast-env"))  # one env only: not compared
    rounds.append(line("d-torch", "w1", 2.0))
    rounds.append(line("d-torch", "w1", 2.0, env="other", stamp="2026-11-30T11:00:00+00:00"))
    merged, summary = summarize([write(tmp_path / "r.jsonl", rounds)])
    assert merged.repeats == 4 and len(merged.runs) == 9
    fast, torch = summary.env_comparisons
    assert (fast.solution, fast.base, fast.other) == ("d-fast", "slow-env", "fast-env")
    [row] = fast.workloads
    assert row.runs == [3, 3] and row.modes == "graph/graph"
    assert math.isclose(row.ratio.value, 0.80 / 0.99) and row.ratio.within_noise is False
    assert fast.geomean.value == row.ratio.value and fast.geomean.ci95 == row.ratio.ci95
    assert (torch.solution, torch.base, torch.other) == ("d-torch", "other", "torch-2.11-cu130")
    assert torch.geomean.value == 1.0 and torch.geomean.within_noise is True
    assert [r.runs for r in torch.workloads] == [[1, 1]]
    text = render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")
    assert "## Environment comparisons" in text and "fast-env faster" in text


def test_the_report_names_a_stand_in_source_by_its_closure_hash(tmp_path: Path) -> None:
    """A lock building 9241ae3e in place of the audit's unreachable 0f11e178: its figures are the
    stand-in's, and the report says so; a lock without historical pins and an unreadable one add
    nothing."""
    import shutil
    import subprocess

    from envaudit.lock.history import stand_in_notes

    closures = {}
    for env in ("flashmla-13.3", "torch-cpu"):
        (tmp_path / env).mkdir()
        shutil.copy(Path("locks") / env / "lock.json", tmp_path / env / "lock.json")
        closures[env] = json.loads((tmp_path / env / "lock.json").read_text())["closure_hash"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "lock.json").write_text("{")
    notes = stand_in_notes([*closures.values(), "f" * 64], tmp_path)
    assert list(notes) == [closures["flashmla-13.3"]]
    [note] = notes[closures["flashmla-13.3"]]
    assert "9241ae3ef9ba" in note and "0f11e178" in note and "for the stand-in" in note

    # a closure the locks have moved on from is read from git history
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    git("init", "-q")
    git("add", "flashmla-13.3")
    git("commit", "-q", "-m", "the lock as measured")
    moved = json.loads((tmp_path / "flashmla-13.3" / "lock.json").read_text())
    moved["closure_hash"] = "e" * 64
    (tmp_path / "flashmla-13.3" / "lock.json").write_text(json.dumps(moved))
    git("commit", "-q", "-am", "the lock moved on")
    again = stand_in_notes([closures["flashmla-13.3"]], tmp_path)
    assert again == notes
