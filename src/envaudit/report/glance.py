"""What performance.md and report.html both print, from the one typed summary: the "at a
glance" rows (per definition and GPU model, one row per comparison of report.choice, with what
it was made on and who was left out), the sentences that say how a figure was made, and the
environment comparisons' verdicts. Each output lays them out its own way; neither words them."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace

from envaudit.report.intervals import CARD_TO_CARD_SD, RUN_TO_RUN_SD, Z95
from envaudit.schema.interfaces import Interface
from envaudit.schema.summary import (
    Choice,
    ChoiceComparison,
    DeviceBlock,
    EnvComparison,
    LeftOut,
    Ratio,
    ReproduceFrom,
    Summary,
)


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


@dataclass(frozen=True)
class GlanceRow:
    """One row of at a glance: a definition's comparison on one GPU model."""

    definition: str
    first: bool
    """The definition's first row (later rows are its other comparisons)."""
    passed: int
    """Runs (one per solution and workload) that passed."""
    total: int
    workloads: int
    """Workloads those runs cover."""
    compared: str
    preferred: str
    speedup: float | None
    speedup_text: str
    ci: str
    runner_up: str
    left_out: list[str]


def choice_rows(definition: str, dblock: DeviceBlock, choice: Choice) -> list[GlanceRow]:
    """One row per comparison (the first carries the definition's pass count: the runs, one
    per solution and workload, that passed, and how many workloads they cover)."""
    passed = sum(s.workloads.passed for s in dblock.solutions)
    total = sum(s.workloads.total for s in dblock.solutions)
    workloads = len({r.uuid for s in dblock.solutions for r in s.per_workload})
    names = [s.solution for s in dblock.solutions]
    twice = {name for name in names if names.count(name) > 1}
    left = [_left(item, definition, twice) for item in choice.left_out]

    def row(first: bool, compared: str, preferred: str, left_out: list[str]) -> GlanceRow:
        return GlanceRow(
            definition,
            first,
            passed,
            total,
            workloads,
            compared,
            preferred,
            None,
            "–",
            "",
            "–",
            left_out,
        )

    if not choice.comparisons:
        return [row(True, "–", f"none ({choice.reason})", left)]
    if choice.choice is None and choice.reason:  # compared, but nothing to choose
        first = choice.comparisons[0]
        out = left + [_left(item, definition, twice) for item in first.left_out]
        return [row(True, compared_text(first), f"none ({choice.reason})", out)]
    first, *wider = choice.comparisons
    out = left + [_left(item, definition, twice) for item in first.left_out]
    out += [_wider_text(comparison, definition, twice) for comparison in wider]
    return [
        _choice(row(True, compared_text(first), "none", out), first, definition, choice.baseline)
    ]


def _wider_text(comparison: ChoiceComparison, definition: str, twice: set[str]) -> str:
    """The second comparison (every workload the baseline passed, among the solutions that
    ran them all) as one note of the row's left-out cell: one row per definition, and the
    choice on the wider set beside the solutions it leaves out."""
    suite = f" ({comparison.suite} suite)" if comparison.suite else ""
    best = comparison.choice
    chosen = "no choice"
    if best is not None:
        chosen = f"{short_name(best.solution, definition)} "
        chosen += speedup_text(best.geomean_speedup, best.ci95)
    left = "; ".join(_left(item, definition, twice) for item in comparison.left_out)
    return f"on all {len(comparison.workloads)} workloads{suite}: {chosen}" + (
        f", without {left}" if left else ""
    )


def compared_text(comparison: ChoiceComparison) -> str:
    """ "2 (dev suite, run by all)", "5 (all suite)": the set a choice was made on."""
    notes = [f"{comparison.suite} suite"] if comparison.suite else []
    if comparison.scope == "common":
        notes.append("run by all")
    return f"{len(comparison.workloads)}" + (f" ({', '.join(notes)})" if notes else "")


def _choice(
    row: GlanceRow, comparison: ChoiceComparison, definition: str, baseline: str | None
) -> GlanceRow:
    """The choice and its runner-up; against a runner-up that is not the baseline (whose
    comparison the choice's speedup already is), the runner-up's time over the choice's."""
    best, runner = comparison.choice, comparison.runner_up
    if best is None:
        return row
    same = runner is not None and runner.solution == best.solution
    runner_text = "–"
    if runner is not None:
        runner_text = f"{short_name(runner.solution, definition)}"
        runner_text += f" {speedup_text(runner.geomean_speedup, runner.ci95)}" + (
            f" ({runner.env})" if same else ""
        )
        ratio = comparison.ratio_to_runner_up
        if ratio is not None and runner.solution != baseline:
            same_time = ", indistinguishable" if ratio.within_noise else ""
            runner_text += f" (time vs the choice: {ratio_text(ratio)}{same_time})"
    return replace(
        row,
        preferred=short_name(best.solution, definition) + (f" ({best.env})" if same else ""),
        speedup=best.geomean_speedup,
        speedup_text=speedup_text(best.geomean_speedup, best.ci95),
        ci=interval_text(best.ci95),
        runner_up=runner_text,
    )


def median_text(median_ms: float | None, iqr_ms: float | None) -> str:
    """ "0.1903 ±0.3%": a median (ms) with half its interquartile range, as a share of it (the
    line's own spread, which a reader needs beside a single figure); "–" when not timed."""
    if median_ms is None:
        return "–"
    if iqr_ms is None or median_ms <= 0:
        return f"{median_ms:.4g}"
    return f"{median_ms:.4g} ±{50 * iqr_ms / median_ms:.1f}%"


def ratio_text(ratio: Ratio) -> str:
    """ "1.0054 [0.9868, 1.0243]": a ratio near 1, with four decimals."""
    bounds = ratio.ci95
    return f"{ratio.value:.4f}" + (f" [{bounds[0]:.4f}, {bounds[1]:.4f}]" if bounds else "")


MEASURED_ONLY_ON = "measured only on "


def _left(item: LeftOut, definition: str, twice: set[str]) -> str:
    """ "fa4: not run on 2: ..."; a solution measured in two envs names the env it was in; a
    GPU model named by its name alone (the section's heading gives memory and driver)."""
    name = short_name(item.solution, definition)
    if item.solution in twice and item.env:
        name += f" ({item.env})"
    reason = item.reason
    if reason.startswith(MEASURED_ONLY_ON):
        models = reason.removeprefix(MEASURED_ONLY_ON).split("; ")
        reason = MEASURED_ONLY_ON + ", ".join(m.split(",")[0] for m in models)
    return f"{name}: {reason}"


def reproduce_command(summary: Summary, number: int) -> str:
    """The `envaudit reproduce` command for results line `number`, runnable as printed from
    the folder `envaudit merge` ran in (`summary.reproduce_from`: the report's results file,
    data root and solutions root as merge was given them, relative where they were)."""
    where = summary.reproduce_from or ReproduceFrom()
    command = f"envaudit reproduce {where.results}:{number}"
    if where.data_root:
        command += f" --data-root {where.data_root}"
    if where.solutions_root:
        command += f" --solutions-root {where.solutions_root}"
    return command


# ---------------------------------------------------------------- text both outputs print

SPEEDUP_RULE = (
    "Speedups compare each solution with its definition's baseline: per workload, the"
    " baseline's newest line on the same GPU model (the line printed beside it, named by its"
    " results line; on the same card where the baseline's newest line ran there, else on"
    " another card of the model, with the wider card-to-card floor), each in its own"
    " environment, each line by its graph-replay median where it has one, else its eager"
    " median (the modes are named beside every speedup); aggregates are geometric means over"
    " the workloads both passed."
)
"""The opening sentence of performance.md and report.html: what a speedup divides."""


def interval_caption() -> str:
    """Where the 95% CI columns come from, with the floors' figures computed from the constants
    in envaudit.report.intervals, so the sentence cannot drift from the arithmetic."""
    same, cards = RUN_TO_RUN_SD["cuda_graph"], CARD_TO_CARD_SD["cuda_graph"]
    one = 100 * Z95 * math.sqrt(2) * same
    return (
        "Speedup: the baseline's newest line on this GPU model over this one, each by its graph"
        " figure where it has one, else its eager figure (the modes are named). 95% CI: from"
        " each line's quartiles plus a run-to-run floor per kind of figure, the 90th"
        f" percentile of repeated runs: {100 * same:.1f}% for a graph or device-bound eager"
        f" figure against a run on the same card (about ±{one:.1f}% on one speedup),"
        f" {100 * cards:.1f}% for graph figures from two cards of the model,"
        f" {100 * CARD_TO_CARD_SD['host-bound']:.0f}% for host-bound eager figures and"
        f" {100 * RUN_TO_RUN_SD['eager only']:.0f}% for eager figures with no graph figure,"
        " or the group's own scatter where repeated runs show a wider one. Within noise: the"
        " interval holds 1.0."
    )


ENV_COMPARISON_INTRO = (
    "The same solution in two environments on one GPU model, by the report's one comparison"
    " rule (the rule of the speedups, of at a glance and of `envaudit compare --across-envs`):"
    " per workload both passed, the time of the newest line in the second env over that in the"
    " first (below 1 the second is faster), each by its graph figure where it has one, with its"
    " 95% interval (each line's quartiles plus the run-to-run floor of its kind of figure, or"
    " its group's own scatter where its repeated runs show a wider one), and the geometric mean"
    " over the workloads with its interval; within noise when the interval holds 1.0. Read the"
    " geometric mean first: about one interval in twenty excludes 1.0 by chance."
)


def env_verdict(ratio: Ratio, names: tuple[str, str]) -> str:
    """In words, for OTHER/BASE = ratio with names (BASE, OTHER); no interval must not read
    as a win."""
    if ratio.within_noise is None:
        return "no interval"
    if ratio.within_noise:
        return "within noise"
    return f"{names[1]} faster" if ratio.value < 1 else f"{names[0]} faster"


@dataclass(frozen=True)
class EnvRow:
    """One row of an environment comparison as both outputs print it (the last: the geometric
    mean)."""

    workload: str
    modes: str
    runs: str
    lines: str
    ratio: str
    ci: str
    verdict: str


def env_rows(item: EnvComparison) -> list[EnvRow]:
    names = (item.base, item.other)
    rows = [
        EnvRow(
            workload=plain_text(row.workload),
            modes=row.modes,
            runs=f"{row.runs[0]}, {row.runs[1]}",
            lines=", ".join(str(n) if n else "–" for n in row.results_lines),
            ratio=f"{row.ratio.value:.4f}",
            ci=_ratio_bounds(row.ratio),
            verdict=env_verdict(row.ratio, names),
        )
        for row in item.workloads
    ]
    geo = item.geomean
    rows.append(
        EnvRow(
            "geometric mean",
            "",
            "",
            "",
            f"{geo.value:.4f}",
            _ratio_bounds(geo),
            env_verdict(geo, names),
        )
    )
    return rows


def _ratio_bounds(ratio: Ratio) -> str:
    bounds = ratio.ci95
    return "–" if not bounds else f"[{bounds[0]:.4f}, {bounds[1]:.4f}]"


def differ_in_text(item: EnvComparison) -> str:
    """What the two envs' locks differ in, so the comparison says what it is of."""
    found = item.differ_in
    if found is None:
        return "Their locks could not both be read: what differs between them is not stated."
    if not found:
        return "Their locks are identical."
    items = "; ".join(plain_text(str(x)) for x in found)
    only = "only " if len(found) <= 3 else ""
    return f"{item.base} and {item.other}: their locks differ {only}in {items}."


def stand_in_notes(summary: Summary) -> list[str]:
    """ "flashmla-13.1: source flash-mla: ... stands in for ...", one per env and note."""
    return sorted({f"{e.env}: {note}." for e in summary.environments for note in e.stand_in})


@dataclass(frozen=True)
class InterfaceRow:
    """One native call a definition stands for, as both outputs print it."""

    definition: str
    library: str
    function: str
    pinned: str
    drop_in: str
    work: str


def interface_rows(interfaces: Sequence[Interface]) -> list[InterfaceRow]:
    rows = []
    for item in interfaces:
        source = item.pinned_source
        rows.append(
            InterfaceRow(
                definition=item.definition,
                library=item.library,
                function=item.function,
                pinned=f"{source.repo}@{source.rev[:12]}:{source.path}",
                drop_in=str(item.drop_in),
                work="; ".join(item.integration_work) or "–",
            )
        )
    return rows
