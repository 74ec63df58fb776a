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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envaudit.report.intervals import geomean_interval, geomean_log_variance, holds_one, interval
from envaudit.report.summary import geomean

CHOICE_RULE = (
    "a choice ranks only solutions measured on the same workloads of one GPU model. Eligible:"
    " solutions that passed every workload they ran there (a failure, or a time the judge"
    " flagged, leaves a solution out)."
    " First choice: on the workloads every eligible solution passed; where some ran more, a"
    " second choice on every workload the baseline passed, among those that passed them all."
    " Ranking: the geometric-mean speedup over the baseline on that set (graph timing where"
    " both have it, else eager); the baseline is a candidate at 1.0, and a solution whose"
    " speedup's 95% interval holds 1.0 (within noise) ranks below it; the choice and the"
    " runner-up are indistinguishable when the interval of their ratio holds 1.0. Every"
    " solution left out of a choice is listed with the reason"
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
    labels: dict[str, str]  # uuid -> label (or the uuid's head)

    @classmethod
    def of(cls, block: Mapping[str, Any]) -> Entry:
        rows = block["per_workload"]
        labels = {r["uuid"]: str(r["label"] or r["uuid"][:8]) for r in rows}
        return cls(
            solution=str(block["solution"]),
            env=str(block["env"]),
            closure_hash=block["closure_hash"],
            is_baseline=bool(block["baseline"]),
            failed={labels[r["uuid"]]: r["status"] for r in rows if r["status"] != "PASSED"},
            flagged={
                labels[r["uuid"]]: r["timing_flags"][0] for r in rows if r.get("timing_flags")
            },
            timed={
                r["uuid"]: (
                    1.0 if block["baseline"] else float(r["speedup_primary"]),
                    0.0 if block["baseline"] else r["speedup_log_variance"],
                )
                for r in rows
                if r["status"] == "PASSED" and (block["baseline"] or r["speedup_primary"])
            },
            labels=labels,
        )

    def key(self) -> dict[str, Any]:
        return {"solution": self.solution, "env": self.env}


def preferred_solutions(
    summary: Mapping[str, Any], suites: Mapping[str, Mapping[str, Sequence[str]]] | None = None
) -> dict[str, Any]:
    """Per definition and GPU model: the comparisons, their choices and who was left out.
    `suites` (suite name -> definition -> workload uuids) names a comparison's workload set."""
    choices: dict[str, Any] = {}
    for definition, block in summary["definitions"].items():
        devices = block["devices"]
        measured_on = {
            model: {s["solution"] for s in dblock["solutions"]} for model, dblock in devices.items()
        }
        per_device = {}
        for model, dblock in devices.items():
            elsewhere = {
                name: sorted(m for m, names in measured_on.items() if name in names)
                for names in measured_on.values()
                for name in names
                if name not in measured_on[model]
            }
            named = _suite_names(suites or {}, definition)
            per_device[model] = choose(dblock["solutions"], block["baseline"], elsewhere, named)
        choices[definition] = per_device
    return {"rule": CHOICE_RULE, "choices": choices}


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
    blocks: Sequence[Mapping[str, Any]],
    baseline: str | None,
    elsewhere: Mapping[str, list[str]] | None = None,
    suite_names: Mapping[frozenset[str], str] | None = None,
) -> dict[str, Any]:
    """The comparisons of one definition on one GPU model (see the module's docstring)."""
    entries = [Entry.of(b) for b in blocks]
    left_out = [
        {**e.key(), "reason": "failed: " + ", ".join(f"{w} {s}" for w, s in e.failed.items())}
        for e in entries
        if e.failed
    ]
    left_out += [
        {"solution": name, "env": None, "reason": "measured only on " + ", ".join(models)}
        for name, models in sorted((elsewhere or {}).items())
    ]
    left_out += [
        {
            **e.key(),
            "reason": "timing flagged: " + "; ".join(f"{w} {f}" for w, f in e.flagged.items()),
        }
        for e in entries
        if e.flagged and not e.failed
    ]
    entries = [e for e in entries if not e.flagged or e.is_baseline]
    base = next((e for e in entries if e.is_baseline), None)
    result: dict[str, Any] = {"baseline": baseline, "left_out": left_out, "comparisons": []}
    if base is None:
        result |= _none("no baseline measured on this GPU: speedups are undefined")
        return result
    eligible = [e for e in entries if not e.failed and e.timed]
    untimed = [e for e in entries if not e.failed and not e.timed]
    left_out += [{**e.key(), "reason": "no timing comparable with the baseline's"} for e in untimed]
    full = frozenset(base.timed)
    common = frozenset.intersection(*(frozenset(e.timed) for e in eligible)) if eligible else full
    sets = [(common, "common" if full - common else "all measured")] if common else []
    if full - common or not common:
        sets.append((full, "full"))
    for workloads, scope in sets:
        result["comparisons"].append(
            _comparison(eligible, workloads, base, suite_names or {}) | {"scope": scope}
        )
    first = result["comparisons"][0] if result["comparisons"] else None
    if first is None or first["choice"] == "none":
        result |= _none("no solution passed every workload it ran")
    else:
        result |= {k: first[k] for k in ("choice", "runner_up", "candidates")}
        if "indistinguishable" in first:
            result["indistinguishable"] = first["indistinguishable"]
    return result


def _none(reason: str) -> dict[str, Any]:
    return {"choice": "none", "runner_up": None, "candidates": 0, "reason": reason}


def _comparison(
    eligible: Sequence[Entry],
    workloads: frozenset[str],
    base: Entry,
    suite_names: Mapping[frozenset[str], str],
) -> dict[str, Any]:
    ranked, missing = [], []
    for entry in eligible:
        absent = workloads - set(entry.timed)
        if absent:
            names = sorted(base.labels.get(u, u[:8]) for u in absent)
            missing.append(
                {**entry.key(), "reason": f"not run on {len(names)}: " + ", ".join(names)}
            )
            continue
        ranked.append(_candidate(entry, workloads))
    ranked.sort(key=_rank)
    found: dict[str, Any] = {
        "workloads": sorted(base.labels.get(u, u[:8]) for u in workloads),
        "suite": suite_names.get(workloads),
        "choice": _public(ranked[0]) if ranked else "none",
        "runner_up": _public(ranked[1]) if len(ranked) > 1 else None,
        "candidates": len(ranked),
        "left_out": missing,
    }
    if len(ranked) > 1:
        found["indistinguishable"] = _indistinguishable(ranked[0], ranked[1])
    return found


def _candidate(entry: Entry, workloads: frozenset[str]) -> dict[str, Any]:
    """The entry's geometric-mean speedup over exactly these workloads, with its interval."""
    speedups = [entry.timed[u][0] for u in sorted(workloads)]
    variances = [entry.timed[u][1] for u in sorted(workloads)]
    known = [v for v in variances if v is not None]
    geo = geomean(speedups) or 0.0
    bounds = geomean_interval(speedups, known) if len(known) == len(speedups) else None
    return {
        **entry.key(),
        "closure_hash": entry.closure_hash,
        "geomean_speedup": 1.0 if entry.is_baseline else round(geo, 6),
        "ci95": None if entry.is_baseline or bounds is None else [round(b, 6) for b in bounds],
        "within_noise": False if entry.is_baseline else holds_one(bounds),
        "log_variance": 0.0
        if entry.is_baseline
        else (geomean_log_variance(known) if bounds is not None else None),
        "is_baseline": entry.is_baseline,
    }


def _rank(candidate: Mapping[str, Any]) -> tuple[float, bool, str]:
    """Fastest first; a win within noise counts as none, so the baseline goes ahead of it."""
    speedup = float(candidate["geomean_speedup"])
    if candidate["within_noise"]:
        speedup = min(speedup, 1.0)
    return -speedup, not candidate["is_baseline"], str(candidate["solution"])


def _public(candidate: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in candidate.items() if k not in ("log_variance", "is_baseline")}


def _indistinguishable(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool | None:
    """Whether the interval of first/second (geometric-mean speedups) holds 1.0."""
    variances = (first["log_variance"], second["log_variance"])
    if variances[0] is None or variances[1] is None:
        return None
    ratio = first["geomean_speedup"] / second["geomean_speedup"]
    return holds_one(interval(math.log(ratio), variances[0] + variances[1]))
