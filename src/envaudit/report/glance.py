"""The "at a glance" rows both performance.md and report.html show: per definition and GPU
model, one row per comparison of report.choice, with what it was made on and who was left out."""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any


def cell_text(text: str) -> str:
    """Free text from data (a workload's label) as one Markdown table cell shows it: control
    and format characters dropped (an ANSI escape, a bidi override that reverses the row), '|'
    escaped, on one line."""
    return " ".join(plain_text(text).replace("|", "\\|").split())


def plain_text(text: str) -> str:
    """The same for HTML, which escapes '|' and markup itself."""
    return "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf"))


def short_name(solution: str, definition: str) -> str:
    """A solution's name without its definition's (the definition heads the row or section)."""
    prefix = f"{definition}-"
    return solution[len(prefix) :] if solution.startswith(prefix) else solution


def interval_text(bounds: Sequence[float] | None) -> str:
    """ "[2.31, 2.47]", or "" without an interval."""
    return f"[{bounds[0]:.2f}, {bounds[1]:.2f}]" if bounds else ""


def speedup_text(value: float, bounds: Sequence[float] | None) -> str:
    """ "2.39x [2.31, 2.47]", "1.01x [0.98, 1.04], within noise" (the interval holds 1.0)."""
    text = f"{value:.2f}x" if abs(value) < 1000 else f"{value:.0f}x"
    if not bounds:
        return text
    text += f" {interval_text(bounds)}"
    return text + (", within noise" if bounds[0] <= 1.0 <= bounds[1] else "")


def choice_rows(
    definition: str, dblock: Mapping[str, Any], choice: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """One row per comparison (the first carries the definition's pass count: the runs, one
    per solution and workload, that passed, and how many workloads they cover)."""
    passed = sum(s["workloads"]["passed"] for s in dblock["solutions"])
    total = sum(s["workloads"]["total"] for s in dblock["solutions"])
    workloads = len({r["uuid"] for s in dblock["solutions"] for r in s["per_workload"]})
    names = [s["solution"] for s in dblock["solutions"]]
    twice = {name for name in names if names.count(name) > 1}
    left = [_left(item, definition, twice) for item in choice["left_out"]]
    base = {"definition": definition, "passed": passed, "total": total, "workloads": workloads}
    if not choice["comparisons"]:
        return [base | _empty(f"none ({choice['reason']})") | {"left_out": left, "first": True}]
    rows = []
    for i, comparison in enumerate(choice["comparisons"]):
        out = left + [_left(item, definition, twice) for item in comparison["left_out"]]
        rows.append(
            base
            | {"first": i == 0, "compared": compared_text(comparison), "left_out": out}
            | _choice(comparison, definition)
        )
    return rows


def compared_text(comparison: Mapping[str, Any]) -> str:
    """ "2 (dev suite, run by all)", "5 (all suite)": the set a choice was made on."""
    notes = [f"{comparison['suite']} suite"] if comparison.get("suite") else []
    if comparison["scope"] == "common":
        notes.append("run by all")
    return f"{len(comparison['workloads'])}" + (f" ({', '.join(notes)})" if notes else "")


def _empty(preferred: str) -> dict[str, Any]:
    return {
        "compared": "–",
        "preferred": preferred,
        "speedup": None,
        "speedup_text": "–",
        "ci": "",
        "runner_up": "–",
    }


def _choice(comparison: Mapping[str, Any], definition: str) -> dict[str, Any]:
    best, runner = comparison["choice"], comparison["runner_up"]
    if best == "none":
        return _empty("none")
    same = runner is not None and runner["solution"] == best["solution"]
    runner_text = "–"
    if runner:
        runner_text = f"{short_name(runner['solution'], definition)}"
        runner_text += f" {speedup_text(runner['geomean_speedup'], runner.get('ci95'))}" + (
            f" ({runner['env']})" if same else ""
        )
        if comparison.get("indistinguishable"):
            runner_text += " (indistinguishable)"
    return {
        "preferred": short_name(best["solution"], definition)
        + (f" ({best['env']})" if same else ""),
        "speedup": best["geomean_speedup"],
        "speedup_text": speedup_text(best["geomean_speedup"], best.get("ci95")),
        "ci": interval_text(best.get("ci95")),
        "runner_up": runner_text,
    }


def _left(item: Mapping[str, Any], definition: str, twice: set[str]) -> str:
    """ "fa4: not run on 2: ..."; a solution measured in two envs names the env it was in."""
    name = short_name(str(item["solution"]), definition)
    if item["solution"] in twice and item.get("env"):
        name += f" ({item['env']})"
    return f"{name}: {item['reason']}"


def reproduce_command(summary: Mapping[str, Any], number: int) -> str:
    """The `envaudit reproduce` command for results line `number`, runnable as printed from
    the folder `envaudit merge` ran in (`summary["reproduce_from"]`: the report's results file,
    data root and solutions root as merge was given them, relative where they were)."""
    where = summary.get("reproduce_from") or {}
    command = f"envaudit reproduce {where.get('results', 'results.jsonl')}:{number}"
    for flag in ("data_root", "solutions_root"):
        if where.get(flag):
            command += f" --{flag.replace('_', '-')} {where[flag]}"
    return command
