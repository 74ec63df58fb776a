"""Choices on equal footing: a solution is only ranked against others on the same workloads,
and every solution left out of a choice is listed with its reason."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from envaudit.report.choice import preferred_solutions
from envaudit.report.markdown import render_markdown
from envaudit.report.summary import SolutionInfo
from tests.report.test_merge import GPU_B, MODEL_A, MODEL_B, line, summarize, write

SOLUTIONS = {
    "d-torch": SolutionInfo("d-torch", "d", "me", "torch-2.11-cu130", True),
    "d-fast": SolutionInfo("d-fast", "d", "me", "fast-env", False),
    "d-wide": SolutionInfo("d-wide", "d", "me", "torch-2.11-cu130", False),
}


def choices(tmp_path: Path, lines: list[dict[str, Any]], suites: Any = None) -> dict[str, Any]:
    """The choices of definition d per GPU model, as preferred-solutions.json has them."""
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    dumped = preferred_solutions(summary, suites).model_dump(mode="json")
    return dict(dumped["choices"]["d"])


def test_a_faster_solution_with_fewer_workloads_wins_only_where_both_ran(tmp_path: Path) -> None:
    lines = [line("d-torch", w, 10.0) for w in ("w1", "w2", "w3")]
    lines += [line("d-fast", w, 1.0) for w in ("w1", "w2")]  # 10x, on two of three
    lines += [line("d-wide", "w1", 5.0), line("d-wide", "w2", 5.0), line("d-wide", "w3", 1.0)]
    suites = {"dev": {"d": ["w1", "w2"]}, "all": {"d": ["w1", "w2", "w3"]}}
    choice = choices(tmp_path, lines, suites)[MODEL_A]
    common, full = choice["comparisons"]
    assert (common["scope"], common["suite"], common["workloads"]) == (
        "common",
        "dev",
        ["w1", "w2"],
    )
    assert common["choice"]["solution"] == "d-fast" and common["runner_up"]["solution"] == "d-wide"
    assert common["choice"]["geomean_speedup"] == 10.0
    assert common["runner_up"]["geomean_speedup"] == 2.0  # over w1 and w2 only, not its 10x on w3
    assert (full["scope"], full["suite"]) == ("full", "all")
    assert full["choice"]["solution"] == "d-wide"
    assert full["left_out"] == [
        {"solution": "d-fast", "env": "torch-2.11-cu130", "reason": "not run on 1: w3"}
    ]
    # the runner-up against the choice directly, by the one comparison rule
    assert common["indistinguishable"] is False
    assert math.isclose(common["ratio_to_runner_up"]["value"], 5.0)  # d-wide takes 5x the time
    assert choice["choice"]["solution"] == "d-fast" and choice["left_out"] == []


def test_a_solution_failing_one_workload_is_left_out_with_the_workload(tmp_path: Path) -> None:
    lines = [line("d-torch", w, 10.0) for w in ("w1", "w2")]
    lines += [line("d-fast", "w1", 1.0), line("d-fast", "w2", 1.0, status="INCORRECT_NUMERICAL")]
    choice = choices(tmp_path, lines)[MODEL_A]
    assert choice["choice"]["solution"] == "d-torch"
    assert [c["scope"] for c in choice["comparisons"]] == ["all measured"]
    assert choice["left_out"] == [
        {
            "solution": "d-fast",
            "env": "torch-2.11-cu130",
            "reason": "failed: w2 INCORRECT_NUMERICAL",
        }
    ]


def test_a_flagged_solution_is_never_chosen_and_every_output_says_why(tmp_path: Path) -> None:
    """A 10x solution whose time the judge flagged on one workload is left out of the choice
    (the baseline is chosen), and the long-form table shows the flag beside that row."""
    lines = [line("d-torch", w, 10.0) for w in ("w1", "w2")]
    fast = [line("d-fast", w, 1.0) for w in ("w1", "w2")]
    fast[1]["timing"]["flags"] = ["eager: the judge's clock read 9.5 ms, 1.0 ms reported"]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines + fast)])
    preferred = preferred_solutions(summary)
    choice = preferred.model_dump(mode="json")["choices"]["d"][MODEL_A]
    assert choice["choice"]["solution"] == "d-torch"
    assert choice["left_out"] == [
        {
            "solution": "d-fast",
            "env": "torch-2.11-cu130",
            "reason": "timing flagged: w2 eager: the judge's clock read 9.5 ms, 1.0 ms reported",
        }
    ]
    text = render_markdown(summary, preferred, [], "envaudit merge")
    [row] = [r for r in text.splitlines() if "PASSED **timing flagged**" in r]
    assert "`fast`" in row and "the judge's clock read 9.5 ms, 1.0 ms reported" in row


def test_a_solution_measured_on_another_gpu_model_is_named_not_compared(tmp_path: Path) -> None:
    lines = [line("d-torch", "w1", 10.0), line("d-torch", "w1", 10.0, gpu=GPU_B)]
    lines += [line("d-fast", "w1", 1.0, gpu=GPU_B)]
    found = choices(tmp_path, lines)
    assert found[MODEL_A]["choice"]["solution"] == "d-torch"
    assert found[MODEL_A]["left_out"] == [
        {"solution": "d-fast", "env": None, "reason": f"measured only on {MODEL_B}"}
    ]
    assert found[MODEL_B]["choice"]["solution"] == "d-fast" and not found[MODEL_B]["left_out"]


def test_no_baseline_no_choice(tmp_path: Path) -> None:
    choice = choices(tmp_path, [line("d-fast", "w1", 1.0)])[MODEL_A]
    assert choice["choice"] is None and "no baseline" in choice["reason"]


def test_the_overview_says_what_each_choice_was_made_on(tmp_path: Path) -> None:
    lines = [line("d-torch", w, 10.0) for w in ("w1", "w2", "w3")]
    lines += [line("d-fast", w, 1.0) for w in ("w1", "w2")]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    text = render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")
    glance = text.split("## At a glance")[1].split("## Provenance")[0]
    # "passed" counts runs (one per solution and workload) and says how many workloads
    head = "| d | 5/5 runs, 3 workloads | 2 (run by all) | `fast` | 10.00x [9.69, 10.32]"
    # one row per definition: the choice on every workload is a note beside who it leaves out
    wider = "on all 3 workloads: torch 1.00x, without fast: not run on 1: w3"
    assert f"{head} | torch 1.00x | {wider} |" in glance  # the speedup is the comparison
    assert "″" not in glance
    assert glance.count(MODEL_A.split(",")[0]) == 1  # the GPU once, not once a row


def test_a_solution_left_out_in_two_envs_names_each_env(tmp_path: Path) -> None:
    """The same solution measured in two locks (tilelang 0.1.12 and 0.1.15) and left out of a
    comparison is two entries, told apart by env, not one name said twice."""
    lines = [line("d-torch", w, 10.0) for w in ("w1", "w2")]
    lines += [line("d-fast", "w1", 1.0, env=env, closure=env) for env in ("lock-a", "lock-b")]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    text = render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")
    glance = text.split("## At a glance")[1].split("## Provenance")[0]
    assert "fast (lock-a): not run on 1: w2; fast (lock-b): not run on 1: w2 |" in glance


def test_the_committed_reports_gdn_prefill_choice_is_made_where_both_ran() -> None:
    """FlashInfer's prefill ran the dev suite's two workloads, Triton all five: FlashInfer is
    chosen on the two, Triton on the five with FlashInfer named as not run on three."""
    preferred = json.loads(Path("docs/report/preferred-solutions.json").read_text())
    [choice] = preferred["choices"]["gdn_prefill_qk4_v8_d128_k_last"].values()
    common, full = choice["comparisons"]
    assert common["suite"] == "dev" and len(common["workloads"]) == 2
    assert common["choice"]["solution"] == "gdn_prefill_qk4_v8_d128_k_last-flashinfer"
    # 35x against the torch baseline timed on FlashInfer's own card (47x against the newest
    # torch run, on another card: the torch reference's time moves that much between cards)
    assert common["choice"]["geomean_speedup"] > 30
    assert full["suite"] == "all" and full["choice"]["solution"].endswith("-triton")
    [left] = full["left_out"]
    assert left["solution"].endswith("-flashinfer") and left["reason"].startswith("not run on 3:")


def test_the_runner_up_carries_its_interval(tmp_path: Path) -> None:
    lines = [
        line(f"d-{name}", w, ms)
        for name, ms in (("torch", 10.0), ("fast", 1.0), ("mid", 2.0))
        for w in ("w1", "w2")
    ]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    text = render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")
    glance = text.split("## At a glance")[1].split("## Provenance")[0]
    [row] = [r for r in glance.splitlines() if r.startswith("| d |")]
    runner = row.split(" | ")[5]
    assert runner.startswith("mid 5.00x [4.85, 5.16] "), row
    # and the runner-up against the choice directly: twice its time, beyond noise
    assert runner.endswith(" (time vs the choice: 2.0000 [1.9383, 2.0637])"), row


def test_a_smoke_run_chooses_nothing_and_a_declined_device_is_no_failure(tmp_path: Path) -> None:
    """A CPU smoke audit: the GPU solutions decline the CPU (UNSUPPORTED_DEVICE), the torch
    ones pass. The smoke suite checks correctness: no solution is preferred from it, and the
    solutions that declined are "not for this device", not "failed"."""
    lines = [line("d-torch", "w1", 10.0), line("d-wide", "w1", 5.0)]
    lines.append(line("d-fast", "w1", 1.0, status="UNSUPPORTED_DEVICE"))
    choice = choices(tmp_path, lines, {"smoke": {"d": ["w1"]}})[MODEL_A]
    assert choice["choice"] is None and "smoke suite" in choice["reason"], choice
    assert choice["left_out"][0]["reason"] == "not for this device (w1)"
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    preferred = preferred_solutions(summary, {"smoke": {"d": ["w1"]}})
    text = render_markdown(summary, preferred, [], "envaudit merge")
    assert "none (smoke suite: a correctness check, whose times choose nothing)" in text
    assert "failed" not in text.split("## ")[1], text  # at a glance


def test_each_workload_s_median_carries_its_own_spread(tmp_path: Path) -> None:
    """A per-workload median is printed with half its interquartile range, as a share of it,
    in performance.md and report.html alike (the line stores its quartiles)."""
    from envaudit.report.html import render_html

    lines = [line("d-torch", "w1", 10.0), line("d-fast", "w1", 2.0)]
    lines[1]["timing"]["graph"]["iqr_ms"] = 0.036  # of a 1.8 ms graph median: ±1.0%
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    preferred = preferred_solutions(summary)
    text = render_markdown(summary, preferred, [], "envaudit merge")
    assert "| 1.8 ±1.0% | 2 |" in text, text
    assert "1.8 ±1.0%" in render_html(summary, preferred, {}, tmp_path, "envaudit merge")
