"""summary.json and preferred-solutions.json from merged lines.

Figures are grouped by definition, then by GPU model (name, memory and driver: never mixed
across models), then by solution *in one environment* (env name and closure hash): a solution
measured in two environments appears twice. Two GPUs of one model are one group, so a re-run on
a second card adds to the report instead of splitting it: per workload the newest line counts,
and every row names the GPU (UUID) its figures came from. Speedups compare a solution's newest
line with its definition's baseline's newest line on the same GPU model (the line the report
prints beside it, named by its results line), each in its own environment, workload by
workload, by the one comparison rule of report/intervals.py (each line's graph figure where it
has one, the modes named, the caveats of host-bound figures kept, repeated runs' own scatter
where it is wider than the floor), and are aggregated as a geometric mean over the workloads
both passed.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from envaudit.report.env_compare import env_comparisons
from envaudit.report.glance import plain_text
from envaudit.report.hardware import peak_for
from envaudit.report.intervals import (
    Speedup,
    figure_mode,
    geomean_interval,
    geomean_log_variance,
    holds_one,
    observed_log_variance,
    speedup_of,
)
from envaudit.report.merge import MergeResult, result_line_numbers
from envaudit.schema.result_line import Achieved, ProbePoint, ResultLine, TimingStats
from envaudit.schema.results import LineKey

MODES: tuple[Literal["eager", "graph"], ...] = ("eager", "graph")


@dataclass(frozen=True)
class SolutionInfo:
    name: str
    definition: str
    author: str
    env: str
    baseline: bool


def _round(value: float | None, digits: int = 6) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def geomean(values: Iterable[float]) -> float | None:
    kept = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(math.log(v) for v in kept)) if kept else None


def _timing(line: ResultLine | None, mode: Literal["eager", "graph"]) -> TimingStats | None:
    return line.stats(mode) if line is not None else None


def device_of(line: ResultLine) -> str:
    """The device a line ran on: its GPU's UUID, or cpu (the device of its key)."""
    return line.device


def gpu_model_of(line: ResultLine) -> str:
    """The group a line's figures belong to: the GPU's name, memory and driver (cpu for CPU
    lines), e.g. "NVIDIA H200, 140 GiB, driver 580.159.04"."""
    env = line.environment
    device = device_of(line)
    if device == "cpu" or not env.gpu_name:
        return device if device == "cpu" else f"unknown GPU {device}"
    parts = [env.gpu_name]
    if env.memory_bytes is not None:
        parts.append(f"{env.memory_bytes / 2**30:.0f} GiB")
    if env.driver:
        parts.append(f"driver {env.driver}")
    return ", ".join(parts)


def _newest_per_workload(lines: list[ResultLine]) -> list[ResultLine]:
    """One line per workload: with a workload run on several GPUs of one model, the newest."""
    newest: dict[str, ResultLine] = {}
    for line in lines:
        uuid = line.workload.uuid
        if uuid not in newest or (line.timestamp or "") > (newest[uuid].timestamp or ""):
            newest[uuid] = line
    return list(newest.values())


def env_of(line: ResultLine) -> tuple[str, str | None]:
    """(the env a line was measured in, "unknown" when it names none; its closure hash)."""
    return str(line.context.env or "unknown"), line.closure_hash


def build_summary(
    merged: MergeResult,
    solutions: Mapping[str, SolutionInfo],
    definitions: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    groups: dict[str, dict[str, dict[tuple[str, str, str | None], list[ResultLine]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for line in merged.lines:
        env, closure = env_of(line)
        groups[line.definition][gpu_model_of(line)][(line.solution, env, closure)].append(line)
    numbers = result_line_numbers(merged.lines, merged.runs)
    repeats: dict[tuple[str, ...], list[ResultLine]] = defaultdict(list)
    for line in merged.runs:
        repeats[_group_of(line)].append(line)
    summary_defs: dict[str, Any] = {}
    for definition in sorted(groups):
        baseline = next(
            (s.name for s in solutions.values() if s.definition == definition and s.baseline), None
        )
        devices = {}
        for model in sorted(groups[definition]):
            runs = groups[definition][model]
            entries = {k: _newest_per_workload(v) for k, v in runs.items()}
            devices[model] = _device_block(entries, repeats, baseline, numbers)
        summary_defs[definition] = {
            "baseline": baseline,
            "op_type": (definitions.get(definition) or {}).get("op_type"),
            "has_roofline_formulas": bool(
                (definitions.get(definition) or {}).get("flops")
                or (definitions.get(definition) or {}).get("bytes")
            ),
            "devices": devices,
        }
    return {
        "definitions": summary_defs,
        "env_comparisons": env_comparisons(
            merged.runs, {s.name: s.env for s in solutions.values()}, gpu_model_of
        ),
        "devices": _devices(merged.lines),
        "environments": _environments(merged.lines),
        "harness_hashes": sorted({str(ln.environment.harness_hash) for ln in merged.lines}),
        "measured_between": _date_range(merged.lines),
        "inputs": [vars(i) for i in merged.inputs],
        "findings": [f.render() for f in merged.findings],
        "conflicts": [{**c.as_dict(), "text": c.render()} for c in merged.conflicts],
        "repeats_dropped": merged.repeats,
        "lines": len(merged.lines),
    }


def _group_of(line: ResultLine) -> tuple[str, ...]:
    """The lines that are runs of one measurement: solution, env, workload, GPU model."""
    env, closure = env_of(line)
    return (line.solution, env, str(closure), line.workload.uuid, gpu_model_of(line))


def _device_block(
    entries: Mapping[tuple[str, str, str | None], list[ResultLine]],
    repeats: Mapping[tuple[str, ...], list[ResultLine]],
    baseline: str | None,
    numbers: Mapping[LineKey, int],
) -> dict[str, Any]:
    """`entries`: each solution's newest line per workload, which is what a row prints and what
    its speedup divides; `repeats`: every line read per group, whose scatter widens an
    interval where it is wider than the floor."""
    base_key = _baseline_key(entries, baseline)
    newest = {ln.workload.uuid: ln for ln in entries.get(base_key, [])} if base_key else {}

    def compared(line: ResultLine) -> tuple[ResultLine | None, Speedup | None]:
        base = newest.get(line.workload.uuid)
        if base is None or not base.passed or not line.passed:
            return base, None
        observed = (_observed(repeats, line), _observed(repeats, base))
        return base, speedup_of(line, base, observed)

    solutions = []
    for key in sorted(entries, key=lambda k: (k[0], k[1], k[2] or "")):
        solutions.append(_solution_block(key, entries[key], compared, key == base_key, numbers))
    return {"baseline_env": base_key[1] if base_key else None, "solutions": solutions}


def _observed(
    repeats: Mapping[tuple[str, ...], list[ResultLine]], line: ResultLine
) -> float | None:
    """The scatter of the runs of `line`'s group, in the figure `line` is compared by."""
    mode = figure_mode(line)
    if mode is None:
        return None
    runs = repeats.get(_group_of(line), [])
    return observed_log_variance([m for ln in runs if ln.passed and (m := ln.median(mode))])


def _baseline_key(
    entries: Mapping[tuple[str, str, str | None], list[ResultLine]], baseline: str | None
) -> tuple[str, str, str | None] | None:
    """The baseline's entry on this GPU; with several environments, the one passing most."""
    keys = [k for k in entries if k[0] == baseline]
    if not keys:
        return None
    return max(keys, key=lambda k: (sum(ln.passed for ln in entries[k]), k[1]))


def _solution_block(
    key: tuple[str, str, str | None],
    lines: list[ResultLine],
    compared: Callable[[ResultLine], tuple[ResultLine | None, Speedup | None]],
    is_baseline: bool,
    numbers: Mapping[LineKey, int],
) -> dict[str, Any]:
    name, env, closure = key
    per_workload = []
    for ln in lines:
        base, speedup = compared(ln)
        row = _workload_row(ln, base, speedup) | {"results_line": numbers.get(ln.key)}
        row["baseline_results_line"] = numbers.get(base.key) if base is not None else None
        per_workload.append(row)
    per_workload.sort(key=lambda row: (str(row["label"]), row["uuid"]))
    failed: dict[str, int] = defaultdict(int)
    for ln in lines:
        if not ln.passed:
            failed[ln.status] += 1
    speedups: dict[str, Any] = {
        mode: _round(geomean(r[f"speedup_{mode}"] for r in per_workload if r[f"speedup_{mode}"]))
        for mode in ("eager", "graph", "primary")
    }
    count = sum(1 for r in per_workload if r["speedup_primary"])
    timed = [r for r in per_workload if r["speedup_primary"] and r["speedup_log_variance"]]
    bounds = geomean_interval(
        [r["speedup_primary"] for r in timed], [r["speedup_log_variance"] for r in timed]
    )
    if bounds is not None and len(timed) == count and not is_baseline:
        speedups["primary_ci95"] = [_round(b) for b in bounds]
        speedups["within_noise"] = holds_one(bounds)
        speedups["log_variance"] = _round(
            geomean_log_variance([r["speedup_log_variance"] for r in timed])
        )
    context = lines[0].context
    return {
        "solution": name,
        "baseline": is_baseline,
        "env": env,
        "closure_hash": closure,
        "runtime": context.runtime,
        "image_id": context.image_id,
        "over": context.env_check.overlay_on if context.env_check else None,
        "solution_hashes": sorted({str(ln.solution_hash) for ln in lines}),
        "gpus": sorted({device_of(ln) for ln in lines}),
        "declared_env_check": _env_check(lines),
        "workloads": {
            "total": len(lines),
            "passed": sum(ln.passed for ln in lines),
            "failed": dict(sorted(failed.items())),
        },
        "geomean_speedup": {**speedups, "workloads_compared": count},
        "roofline_fraction_median": _round(
            statistics.median(fr)
            if (fr := [r["roofline_fraction"] for r in per_workload if r["roofline_fraction"]])
            else None
        ),
        "per_workload": per_workload,
    }


def _env_check(lines: list[ResultLine]) -> dict[str, Any] | None:
    """Whether these lines ran in the environment the solution declares (host runs record a
    verify-env check; lines from before that check carry none)."""
    checks = [ln.context.env_check for ln in lines]
    known = [c for c in checks if c is not None and c.matches is not None]
    if not known:
        return None
    bad = [c for c in known if not c.matches]
    worst = bad[0] if bad else known[0]
    return {
        "matches": not bad,
        "missing": worst.missing,
        "different": worst.different,
        "python": worst.python,
    }


def _workload_row(
    line: ResultLine, base: ResultLine | None, speedup: Speedup | None
) -> dict[str, Any]:
    passed = line.passed
    base_ok = base is not None and base.passed
    row: dict[str, Any] = {
        "uuid": line.workload.uuid,
        "label": plain_text(line.workload.label) if line.workload.label else None,
        "device": device_of(line),
        "status": line.status,
        "harness_hash": line.environment.harness_hash,
        "eager_median_ms": _round(line.median("eager")),
        "graph_median_ms": _round(line.median("graph")),
        "timing_flags": list(line.timing.flags or []) if line.timing is not None else [],
    }
    for mode in MODES:
        mine = line.median(mode)
        theirs = base.median(mode) if base_ok and base is not None else None
        row[f"speedup_{mode}"] = _round(theirs / mine) if passed and mine and theirs else None
    row["speedup_primary"] = _round(speedup.value) if speedup else None
    row["primary_timing"] = speedup.modes if speedup else None
    row["speedup_ci95"] = [_round(b) for b in speedup.ci95] if speedup else None
    row["speedup_log_variance"] = _round(speedup.log_variance) if speedup else None
    row["within_noise"] = speedup.within_noise if speedup else None
    row["speedup_caveats"] = list(speedup.caveats) if speedup else []
    row["baseline_device"] = device_of(base) if base is not None else None
    row["roofline_fraction"] = _round(_roofline(line)) if passed else None
    strict = line.strict_diagnostic
    if strict is not None:
        known = [o.factor for o in strict.outputs if o.factor is not None]
        row["strict_holds"] = bool(strict.holds)
        row["strict_factor"] = _round(max(known)) if known else None
    probe = line.scale_probe
    if probe is not None and probe.inputs:
        row["scale_probe"] = [_probe_cell(point) for point in probe.points]
    return row


def _probe_cell(point: ProbePoint) -> dict[str, Any]:
    """One factor of a scale probe: its status (or why it was skipped) and largest error."""
    return {
        "factor": point.factor,
        "status": point.status or "skipped",
        "max_absolute_error": _round(point.max_absolute_error),
        "skipped": point.skipped,
    }


def _roofline(line: ResultLine) -> float | None:
    """Achieved over attainable on the roofline = max(TFLOP/s / peak, GB/s / peak bandwidth),
    from the better of the two timings (graph where present)."""
    achieved = line.achieved or Achieved()
    peak = peak_for(str(line.environment.gpu_name or ""))
    if peak is None:
        return None
    tflops, gbps = achieved.of("graph")
    if not (tflops or gbps):
        tflops, gbps = achieved.of("eager")
    ratios = []
    if tflops:
        ratios.append(tflops / peak.dense_bf16_tflops)
    if gbps:
        ratios.append(gbps / peak.memory_gbps)
    return max(ratios) if ratios else None


def _devices(lines: Iterable[ResultLine]) -> dict[str, Any]:
    """Every GPU model measured, with the UUIDs of its cards."""
    found: dict[str, Any] = {}
    for line in lines:
        env = line.environment
        entry = found.setdefault(
            gpu_model_of(line),
            {
                "name": env.gpu_name or "cpu",
                "driver": env.driver,
                "compute_capability": env.compute_capability,
                "memory_bytes": env.memory_bytes,
                "uuids": [],
            },
        )
        if device_of(line) not in entry["uuids"]:
            entry["uuids"] = sorted([*entry["uuids"], device_of(line)])
    return dict(sorted(found.items()))


def _environments(lines: Iterable[ResultLine]) -> list[dict[str, Any]]:
    found: dict[tuple[str, str | None, str | None, str | None], dict[str, Any]] = {}
    for line in lines:
        env, closure = env_of(line)
        context, environment = line.context, line.environment
        key = (env, closure, context.runtime, context.image_id)
        entry = found.setdefault(
            key,
            {
                "env": env,
                "closure_hash": closure,
                "runtime": context.runtime,
                "image_id": context.image_id,
                "python": environment.python,
                "torch": environment.torch,
                "triton": environment.triton,
                "distributions_fingerprints": set(),
            },
        )
        entry["distributions_fingerprints"].add(str(environment.distributions_fingerprint))
    result = []
    for key in sorted(found, key=lambda k: tuple(str(x) for x in k)):
        entry = dict(found[key])
        entry["distributions_fingerprints"] = sorted(entry["distributions_fingerprints"])
        result.append(entry)
    return result


def _date_range(lines: Iterable[ResultLine]) -> list[str] | None:
    stamps = sorted(ln.timestamp for ln in lines if ln.timestamp)
    return [stamps[0], stamps[-1]] if stamps else None
