"""The one typed summary (schema/summary.py `Summary`) built once from the merged lines:
summary.json is its dump, and preferred-solutions.json (report/choice.py), performance.md,
report.html and the plots render it, so they cannot disagree.

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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envaudit.report.env_compare import env_comparisons
from envaudit.report.glance import plain_text
from envaudit.report.hardware import peak_for
from envaudit.report.intervals import (
    Speedup,
    figure_of,
    geomean_interval,
    geomean_log_variance,
    holds_one,
    observed_of,
    ratio_of,
)
from envaudit.report.merge import Conflict, MergeResult, result_line_numbers
from envaudit.schema.result_line import Achieved, ProbePoint, ResultLine
from envaudit.schema.results import LineKey
from envaudit.schema.summary import (
    ConflictInfo,
    DefinitionBlock,
    DeviceBlock,
    DeviceInfo,
    EnvCheckSummary,
    EnvironmentInfo,
    Figure,
    GeomeanSpeedup,
    InputInfo,
    LineBrief,
    ProbeCell,
    ReproduceFrom,
    SolutionBlock,
    Summary,
    WorkloadCounts,
    WorkloadRow,
)

MODES: tuple[Literal["eager", "graph"], ...] = ("eager", "graph")

StandIns = Callable[[Iterable[str]], Mapping[str, list[str]]]
"""closure hashes -> what each one's lock builds in place of unreachable pins (the caller reads
the locks: lock.history.stand_in_notes)."""
LockDifferences = Callable[[str, str], list[str] | None]
"""(closure A, closure B) -> every item their locks differ in, in words; None where either lock
cannot be found."""


@dataclass(frozen=True)
class LockNotes:
    """What the report says of the locks behind its closures. The report layer reads no lock:
    the command that makes the report reads them (commands/merge.py)."""

    stand_ins: StandIns
    differences: LockDifferences


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


Groups = dict[str, dict[str, dict[tuple[str, str, str | None], list[ResultLine]]]]


def _grouped(lines: Sequence[ResultLine]) -> Groups:
    """definition -> GPU model -> (solution, env, closure) -> its lines."""
    groups: Groups = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for line in lines:
        env, closure = env_of(line)
        groups[line.definition][gpu_model_of(line)][(line.solution, env, closure)].append(line)
    return groups


def build_summary(
    merged: MergeResult,
    solutions: Mapping[str, SolutionInfo],
    definitions: Mapping[str, Mapping[str, Any]],
    locks: LockNotes | None = None,
    reproduce_from: ReproduceFrom | None = None,
    generated_at: str = "",
) -> Summary:
    """The one typed summary every output of the report renders. `locks` names the stand-ins
    of each environment and what two compared environments' locks differ in."""
    groups = _grouped(merged.lines)
    numbers = result_line_numbers(merged.lines, merged.runs)
    repeats: dict[tuple[str, ...], list[ResultLine]] = defaultdict(list)
    for line in merged.runs:
        repeats[_group_of(line)].append(line)

    def figure(line: ResultLine) -> Figure | None:
        return figure_of(line, _observed(repeats, line))

    summary_defs: dict[str, DefinitionBlock] = {}
    for definition in sorted(groups):
        baseline = next(
            (s.name for s in solutions.values() if s.definition == definition and s.baseline), None
        )
        devices = {}
        for model in sorted(groups[definition]):
            runs = groups[definition][model]
            entries = {k: _newest_per_workload(v) for k, v in runs.items()}
            devices[model] = _device_block(entries, figure, baseline, numbers)
        raw = definitions.get(definition) or {}
        summary_defs[definition] = DefinitionBlock(
            baseline=baseline,
            op_type=raw.get("op_type"),
            has_roofline_formulas=bool(raw.get("flops") or raw.get("bytes")),
            devices=devices,
        )
    environments = _environments(merged.lines, locks)
    return Summary(
        generated_at=generated_at,
        definitions=summary_defs,
        env_comparisons=env_comparisons(
            merged.lines,
            {s.name: s.env for s in solutions.values()},
            gpu_model_of,
            figure,
            lambda line: numbers.get(line.key),
            lambda line: len(repeats.get(_group_of(line), [])),
            _differences(environments, locks),
        ),
        devices=_devices(merged.lines),
        environments=environments,
        harness_hashes=sorted({str(ln.environment.harness_hash) for ln in merged.lines}),
        measured_between=_date_range(merged.lines),
        inputs=[InputInfo(**vars(i)) for i in merged.inputs],
        findings=[f.render() for f in merged.findings],
        conflicts=[_conflict(c) for c in merged.conflicts],
        repeats_dropped=merged.repeats,
        lines=len(merged.lines),
        reproduce_from=reproduce_from,
    )


def _conflict(conflict: Conflict) -> ConflictInfo:
    solution, workload, env, closure, device = conflict.key

    def brief(line: ResultLine) -> LineBrief:
        return LineBrief(
            status=line.status,
            solution_hash=line.solution_hash,
            timestamp=line.timestamp,
            source=line.source,
        )

    return ConflictInfo(
        solution=solution,
        workload=workload,
        env=env,
        closure_hash=closure or None,
        device=device,
        kept=brief(conflict.kept),
        dropped=brief(conflict.dropped),
        text=conflict.render(),
    )


def _differences(
    environments: Iterable[EnvironmentInfo], locks: LockNotes | None
) -> Callable[[str, str], list[str] | None]:
    """(env A, env B) -> what their locks differ in: None without locks, or where an env ran
    under several closures (no one pair of locks to name)."""
    closures: dict[str, set[str]] = defaultdict(set)
    for env in environments:
        closures[env.env].add(str(env.closure_hash))

    def differ_in(base: str, other: str) -> list[str] | None:
        pair = closures.get(base, set()), closures.get(other, set())
        if locks is None or len(pair[0]) != 1 or len(pair[1]) != 1:
            return None
        return locks.differences(next(iter(pair[0])), next(iter(pair[1])))

    return differ_in


def _group_of(line: ResultLine) -> tuple[str, ...]:
    """The lines that are runs of one measurement: solution, env, workload, GPU model."""
    env, closure = env_of(line)
    return (line.solution, env, str(closure), line.workload.uuid, gpu_model_of(line))


def _device_block(
    entries: Mapping[tuple[str, str, str | None], list[ResultLine]],
    figure: Callable[[ResultLine], Figure | None],
    baseline: str | None,
    numbers: Mapping[LineKey, int],
) -> DeviceBlock:
    """`entries`: each solution's newest line per workload, which is what a row prints and what
    its speedup divides; `figure`: a line's figure with its group's observed scatter, which
    widens an interval where it is wider than the floor."""
    base_key = _baseline_key(entries, baseline)
    newest = {ln.workload.uuid: ln for ln in entries.get(base_key, [])} if base_key else {}

    def compared(line: ResultLine) -> tuple[ResultLine | None, Speedup | None]:
        base = newest.get(line.workload.uuid)
        if base is None or not base.passed or not line.passed:
            return base, None
        mine, theirs = figure(line), figure(base)
        if mine is None or theirs is None:
            return base, None
        return base, ratio_of(mine, theirs)

    solutions = [
        _solution_block(key, entries[key], compared, figure, key == base_key, numbers)
        for key in sorted(entries, key=lambda k: (k[0], k[1], k[2] or ""))
    ]
    return DeviceBlock(baseline_env=base_key[1] if base_key else None, solutions=solutions)


def _observed(
    repeats: Mapping[tuple[str, ...], list[ResultLine]], line: ResultLine
) -> float | None:
    """The scatter of the runs of `line`'s group, in the figure `line` is compared by."""
    return observed_of(line, repeats.get(_group_of(line), []))


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
    figure: Callable[[ResultLine], Figure | None],
    is_baseline: bool,
    numbers: Mapping[LineKey, int],
) -> SolutionBlock:
    name, env, closure = key
    per_workload = []
    for ln in lines:
        base, speedup = compared(ln)
        row = _workload_row(ln, base, speedup, figure(ln))
        row.results_line = numbers.get(ln.key)
        row.baseline_results_line = numbers.get(base.key) if base is not None else None
        per_workload.append(row)
    per_workload.sort(key=lambda row: (str(row.label), row.uuid))
    failed: dict[str, int] = defaultdict(int)
    for ln in lines:
        if not ln.passed:
            failed[ln.status] += 1
    geo = GeomeanSpeedup(
        eager=_round(geomean(r.speedup_eager for r in per_workload if r.speedup_eager)),
        graph=_round(geomean(r.speedup_graph for r in per_workload if r.speedup_graph)),
        primary=_round(geomean(r.speedup_primary for r in per_workload if r.speedup_primary)),
    )
    primary = [r.speedup_primary for r in per_workload if r.speedup_primary]
    geo.workloads_compared = len(primary)
    timed = [r for r in per_workload if r.speedup_primary and r.speedup_log_variance]
    bounds = geomean_interval(
        [float(r.speedup_primary or 0.0) for r in timed],
        [float(r.speedup_log_variance or 0.0) for r in timed],
    )
    if bounds is not None and len(timed) == len(primary) and not is_baseline:
        geo.primary_ci95 = [float(_round(b) or 0.0) for b in bounds]
        geo.within_noise = holds_one(bounds)
        geo.log_variance = _round(
            geomean_log_variance([float(r.speedup_log_variance or 0.0) for r in timed])
        )
    context = lines[0].context
    fractions = [r.roofline_fraction for r in per_workload if r.roofline_fraction]
    return SolutionBlock(
        solution=name,
        baseline=is_baseline,
        env=env,
        closure_hash=closure,
        runtime=context.runtime,
        image_id=context.image_id,
        over=context.env_check.overlay_on if context.env_check else None,
        solution_hashes=sorted({str(ln.solution_hash) for ln in lines}),
        gpus=sorted({device_of(ln) for ln in lines}),
        declared_env_check=_env_check(lines),
        workloads=WorkloadCounts(
            total=len(lines),
            passed=sum(ln.passed for ln in lines),
            failed=dict(sorted(failed.items())),
        ),
        geomean_speedup=geo,
        roofline_fraction_median=_round(statistics.median(fractions) if fractions else None),
        per_workload=per_workload,
    )


def _env_check(lines: list[ResultLine]) -> EnvCheckSummary | None:
    """Whether these lines ran in the environment the solution declares (host runs record a
    verify-env check; lines from before that check carry none)."""
    checks = [ln.context.env_check for ln in lines]
    known = [c for c in checks if c is not None and c.matches is not None]
    if not known:
        return None
    bad = [c for c in known if not c.matches]
    worst = bad[0] if bad else known[0]
    return EnvCheckSummary(
        matches=not bad,
        missing=list(worst.missing or []),
        different=list(worst.different or []),
        python=worst.python,
    )


def _workload_row(
    line: ResultLine, base: ResultLine | None, speedup: Speedup | None, figure: Figure | None
) -> WorkloadRow:
    passed = line.passed
    base_ok = base is not None and base.passed
    same_mode: dict[str, float | None] = {}
    for mode in MODES:
        mine = line.median(mode)
        theirs = base.median(mode) if base_ok and base is not None else None
        same_mode[mode] = _round(theirs / mine) if passed and mine and theirs else None
    row = WorkloadRow(
        uuid=line.workload.uuid,
        label=plain_text(line.workload.label) if line.workload.label else None,
        device=device_of(line),
        status=line.status,
        harness_hash=line.environment.harness_hash,
        eager_median_ms=_round(line.median("eager")),
        graph_median_ms=_round(line.median("graph")),
        eager_iqr_ms=_round(line.iqr("eager")),
        graph_iqr_ms=_round(line.iqr("graph")),
        timing_flags=list(line.timing.flags or []) if line.timing is not None else [],
        figure=figure,
        speedup_eager=same_mode["eager"],
        speedup_graph=same_mode["graph"],
        baseline_device=device_of(base) if base is not None else None,
        roofline_fraction=_round(_roofline(line)) if passed else None,
    )
    if speedup is not None:
        row.speedup_primary = _round(speedup.value)
        row.primary_timing = speedup.modes
        row.speedup_ci95 = [float(_round(b) or 0.0) for b in speedup.ci95]
        row.speedup_log_variance = _round(speedup.log_variance)
        row.within_noise = speedup.within_noise
        row.speedup_caveats = list(speedup.caveats)
    strict = line.strict_diagnostic
    if strict is not None:
        known = [o.factor for o in strict.outputs if o.factor is not None]
        row.strict_holds = bool(strict.holds)
        row.strict_factor = _round(max(known)) if known else None
    probe = line.scale_probe
    if probe is not None and probe.inputs:
        row.scale_probe = [_probe_cell(point) for point in probe.points]
    return row


def _probe_cell(point: ProbePoint) -> ProbeCell:
    """One factor of a scale probe: its status (or why it was skipped) and largest error."""
    return ProbeCell(
        factor=point.factor,
        status=point.status or "skipped",
        max_absolute_error=_round(point.max_absolute_error),
        skipped=point.skipped,
    )


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


def _devices(lines: Iterable[ResultLine]) -> dict[str, DeviceInfo]:
    """Every GPU model measured, with the UUIDs of its cards."""
    found: dict[str, DeviceInfo] = {}
    for line in lines:
        env = line.environment
        entry = found.setdefault(
            gpu_model_of(line),
            DeviceInfo(
                name=env.gpu_name or "cpu",
                driver=env.driver,
                compute_capability=env.compute_capability,
                memory_bytes=env.memory_bytes,
            ),
        )
        if device_of(line) not in entry.uuids:
            entry.uuids = sorted([*entry.uuids, device_of(line)])
    return dict(sorted(found.items()))


def _environments(
    lines: Iterable[ResultLine], locks: LockNotes | None = None
) -> list[EnvironmentInfo]:
    """Every (env, closure, runtime, image) measured, with the stand-ins its lock builds."""
    found: dict[tuple[str, str | None, str | None, str | None], EnvironmentInfo] = {}
    fingerprints: dict[tuple[str, str | None, str | None, str | None], set[str]] = defaultdict(set)
    for line in lines:
        env, closure = env_of(line)
        context, environment = line.context, line.environment
        key = (env, closure, context.runtime, context.image_id)
        found.setdefault(
            key,
            EnvironmentInfo(
                env=env,
                closure_hash=closure,
                runtime=context.runtime,
                image_id=context.image_id,
                python=environment.python,
                torch=environment.torch,
                triton=environment.triton,
            ),
        )
        fingerprints[key].add(str(environment.distributions_fingerprint))
    ordered = [found[k] for k in sorted(found, key=lambda k: tuple(str(x) for x in k))]
    notes = locks.stand_ins({str(e.closure_hash) for e in ordered}) if locks is not None else {}
    for key, entry in found.items():
        entry.distributions_fingerprints = sorted(fingerprints[key])
        entry.stand_in = list(notes.get(str(entry.closure_hash), []))
    return ordered


def _date_range(lines: Iterable[ResultLine]) -> list[str] | None:
    stamps = sorted(ln.timestamp for ln in lines if ln.timestamp)
    return [stamps[0], stamps[-1]] if stamps else None
