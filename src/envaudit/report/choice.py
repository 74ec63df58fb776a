"""preferred-solutions.json: which solution to use per definition and GPU model, chosen only
between solutions measured on the same workloads.

A geometric mean over different workload sets compares nothing: a solution run on two realistic
shapes at 48x and another run on those two plus three tiny ones at 17x say nothing about each
other. So each choice is made on one workload set that every solution it ranks passed, and the
report says which set (by suite name where one matches) and why each other solution was left out.
Per definition and GPU model there are at most two comparisons:

- on the workloads every eligible solution passed (the common set: everyone on equal footing);
- where some solutions ran more, on every workload the baseline passed (the full set), among
  the solutions that passed all of it.

The first is the headline choice; the second is shown beside it when its set is larger.
No choice is made on the smoke suite (a correctness check: a CPU smoke run chooses nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from envaudit.report.intervals import (
    geomean_interval,
    geomean_log_variance,
    geomean_of,
    holds_one,
    ratio_of,
)
from envaudit.report.summary import geomean
from envaudit.schema.models import EvaluationStatus
from envaudit.schema.summary import (
    Candidate,
    Choice,
    ChoiceComparison,
    DefinitionBlock,
    Figure,
    LeftOut,
    Preferred,
    Ratio,
    SolutionBlock,
    Summary,
)

CHOICE_RULE = (
    "a choice ranks only solutions measured on the same workloads of one GPU model. Eligible:"
    " solutions that passed every workload they ran there (a failure, or a time the judge"
    " flagged, leaves a solution out)."
    " First choice: on the workloads every eligible solution passed; where some ran more, a"
    " second choice on every workload the baseline passed, among those that passed them all."
    " Ranking: the geometric-mean speedup over the baseline on that set (graph timing where"
    " both have it, else eager); the baseline is a candidate at 1.0, and a solution whose"
    " speedup's 95% interval holds 1.0 (within noise) ranks below it; the choice and the"
    " runner-up are indistinguishable when the interval of the geometric mean of the"
    " runner-up's time over the choice's, workload by workload by the one comparison rule,"
    " holds 1.0. Every solution left out of a choice is listed with the reason"
)


@dataclass(frozen=True)
class Entry:
    """One solution in one environment, as the summary's device block has it."""

    solution: str
    env: str
    closure_hash: str | None
    is_baseline: bool
    failed: dict[str, str]  # workload label -> status
    flagged: dict[str, str]  # workload label -> the first of its timing flags
    timed: dict[str, tuple[float, float | None]]  # uuid -> (speedup, log variance)
    figures: dict[str, Figure]  # uuid -> the figure its speedup divides
    labels: dict[str, str]  # uuid -> label (or the uuid's head)

    @classmethod
    def of(cls, block: SolutionBlock) -> Entry:
        rows = block.per_workload
        labels = {r.uuid: r.name for r in rows}
        return cls(
            solution=block.solution,
            env=block.env,
            closure_hash=block.closure_hash,
            is_baseline=block.baseline,
            failed={labels[r.uuid]: r.status for r in rows if not r.passed},
            flagged={labels[r.uuid]: r.timing_flags[0] for r in rows if r.timing_flags},
            timed={
                r.uuid: (
                    1.0 if block.baseline else float(r.speedup_primary or 0.0),
                    0.0 if block.baseline else r.speedup_log_variance,
                )
                for r in rows
                if r.passed and (block.baseline or r.speedup_primary)
            },
            figures={r.uuid: r.figure for r in rows if r.figure is not None},
            labels=labels,
        )

    def left_out(self, reason: str) -> LeftOut:
        return LeftOut(solution=self.solution, env=self.env, reason=reason)


@dataclass(frozen=True)
class _Ranked:
    """A candidate with what ranking it needs beyond what preferred-solutions.json shows."""

    public: Candidate
    entry: Entry
    log_variance: float | None


def preferred_solutions(
    summary: Summary,
    suites: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
    generated_at: str = "",
) -> Preferred:
    """Per definition and GPU model: the comparisons, their choices and who was left out.
    `suites` (suite name -> definition -> workload uuids) names a comparison's workload set."""
    choices: dict[str, dict[str, Choice]] = {}
    for definition, block in summary.definitions.items():
        choices[definition] = _choices(definition, block, suites or {})
    return Preferred(generated_at=generated_at, rule=CHOICE_RULE, choices=choices)


def _choices(
    definition: str,
    block: DefinitionBlock,
    suites: Mapping[str, Mapping[str, Sequence[str]]],
) -> dict[str, Choice]:
    measured_on = {
        model: {s.solution for s in dblock.solutions} for model, dblock in block.devices.items()
    }
    per_device = {}
    for model, dblock in block.devices.items():
        elsewhere = {
            name: sorted(m for m, names in measured_on.items() if name in names)
            for names in measured_on.values()
            for name in names
            if name not in measured_on[model]
        }
        named = _suite_names(suites, definition)
        per_device[model] = choose(dblock.solutions, block.baseline, elsewhere, named)
    return per_device


def _suite_names(
    suites: Mapping[str, Mapping[str, Sequence[str]]], definition: str
) -> dict[frozenset[str], str]:
    """Workload set -> the suite it is for this definition (the smallest name on a tie)."""
    named: dict[frozenset[str], str] = {}
    for name in sorted(suites, key=lambda n: (len(n), n), reverse=True):
        uuids = suites[name].get(definition)
        if uuids:
            named[frozenset(uuids)] = name
    return named


def choose(
    blocks: Sequence[SolutionBlock],
    baseline: str | None,
    elsewhere: Mapping[str, list[str]] | None = None,
    suite_names: Mapping[frozenset[str], str] | None = None,
) -> Choice:
    """The comparisons of one definition on one GPU model (see the module's docstring)."""
    entries = [Entry.of(b) for b in blocks]
    left_out = [e.left_out(_why_not_passed(e.failed)) for e in entries if e.failed]
    left_out += [
        LeftOut(solution=name, env=None, reason="measured only on " + "; ".join(models))
        for name, models in sorted((elsewhere or {}).items())
    ]
    left_out += [
        e.left_out("timing flagged: " + "; ".join(f"{w} {f}" for w, f in e.flagged.items()))
        for e in entries
        if e.flagged and not e.failed
    ]
    entries = [e for e in entries if not e.flagged or e.is_baseline]
    base = next((e for e in entries if e.is_baseline), None)
    result = Choice(baseline=baseline, left_out=left_out)
    if base is None:
        result.reason = "no baseline measured on this GPU: speedups are undefined"
        return result
    eligible = [e for e in entries if not e.failed and e.timed]
    untimed = [e for e in entries if not e.failed and not e.timed]
    left_out += [e.left_out("no timing comparable with the baseline's") for e in untimed]
    full = frozenset(base.timed)
    common = frozenset.intersection(*(frozenset(e.timed) for e in eligible)) if eligible else full
    sets = [(common, "common" if full - common else "all measured")] if common else []
    if full - common or not common:
        sets.append((full, "full"))
    for workloads, scope in sets:
        result.comparisons.append(_comparison(eligible, workloads, base, suite_names or {}, scope))
    first = result.comparisons[0] if result.comparisons else None
    if first is None or first.choice is None:
        result.reason = "no solution passed every workload it ran"
    elif first.suite == SMOKE_SUITE:
        result.reason = "smoke suite: a correctness check, whose times choose nothing"
    else:
        result.choice, result.runner_up = first.choice, first.runner_up
        result.candidates, result.indistinguishable = first.candidates, first.indistinguishable
    return result


UNSUPPORTED = EvaluationStatus.UNSUPPORTED_DEVICE.value
SMOKE_SUITE = "smoke"
"""The suite of a few tiny workloads that checks a solution runs and is right (CI, the CPU):
its times are not what a kernel is chosen by."""


def _why_not_passed(statuses: Mapping[str, str]) -> str:
    """A solution's workloads that did not pass: "not for this device" where it declined the
    device (UNSUPPORTED_DEVICE is no failure), "failed" for the others."""
    declined = [w for w, status in statuses.items() if status == UNSUPPORTED]
    failed = {w: status for w, status in statuses.items() if status != UNSUPPORTED}
    parts = [f"not for this device ({', '.join(declined)})"] if declined else []
    if failed:
        parts.append("failed: " + ", ".join(f"{w} {status}" for w, status in failed.items()))
    return "; ".join(parts)


def _comparison(
    eligible: Sequence[Entry],
    workloads: frozenset[str],
    base: Entry,
    suite_names: Mapping[frozenset[str], str],
    scope: str,
) -> ChoiceComparison:
    ranked, missing = [], []
    for entry in eligible:
        absent = workloads - set(entry.timed)
        if absent:
            names = sorted(base.labels.get(u, u[:8]) for u in absent)
            missing.append(entry.left_out(f"not run on {len(names)}: " + ", ".join(names)))
            continue
        ranked.append(_candidate(entry, workloads))
    ranked.sort(key=_rank)
    found = ChoiceComparison(
        scope=scope,
        workloads=sorted(base.labels.get(u, u[:8]) for u in workloads),
        suite=suite_names.get(workloads),
        choice=ranked[0].public if ranked else None,
        runner_up=ranked[1].public if len(ranked) > 1 else None,
        candidates=len(ranked),
        left_out=missing,
    )
    if len(ranked) > 1:
        found.ratio_to_runner_up = runner_up_ratio(ranked[0].entry, ranked[1].entry, workloads)
        if found.ratio_to_runner_up is not None:
            found.indistinguishable = found.ratio_to_runner_up.within_noise
    return found


def _candidate(entry: Entry, workloads: frozenset[str]) -> _Ranked:
    """The entry's geometric-mean speedup over exactly these workloads, with its interval."""
    speedups = [entry.timed[u][0] for u in sorted(workloads)]
    variances = [entry.timed[u][1] for u in sorted(workloads)]
    known = [v for v in variances if v is not None]
    geo = geomean(speedups) or 0.0
    bounds = geomean_interval(speedups, known) if len(known) == len(speedups) else None
    public = Candidate(
        solution=entry.solution,
        env=entry.env,
        closure_hash=entry.closure_hash,
        geomean_speedup=1.0 if entry.is_baseline else round(geo, 6),
        ci95=None if entry.is_baseline or bounds is None else [round(b, 6) for b in bounds],
        within_noise=False if entry.is_baseline else holds_one(bounds),
    )
    if entry.is_baseline:
        return _Ranked(public, entry, 0.0)
    return _Ranked(public, entry, geomean_log_variance(known) if bounds is not None else None)


def _rank(candidate: _Ranked) -> tuple[float, bool, str]:
    """Fastest first; a win within noise counts as none, so the baseline goes ahead of it."""
    speedup = candidate.public.geomean_speedup
    if candidate.public.within_noise:
        speedup = min(speedup, 1.0)
    return -speedup, not candidate.entry.is_baseline, candidate.public.solution


def runner_up_ratio(first: Entry, second: Entry, workloads: frozenset[str]) -> Ratio | None:
    """The runner-up's time over the choice's, workload by workload by the one comparison rule
    (report/intervals.py `ratio_of`, the rule of the environment comparisons), and their
    geometric mean with its interval; None where a workload has no figure on either side."""
    ratios = []
    for uuid in sorted(workloads):
        mine, theirs = first.figures.get(uuid), second.figures.get(uuid)
        if mine is None or theirs is None:
            return None
        ratios.append(ratio_of(mine, theirs))
    return geomean_of(ratios)
