"""`envaudit compare BEFORE AFTER`: did a change make anything slower or wrong, beyond noise?

Each side is a result file, a report folder (its results.jsonl) or a file of FlashInfer-Bench
traces, read the way `envaudit merge` reads its inputs (report/merge.py `merge_files` with
report/traces.py `trace_to_line`), every line through `ResultLine`. Within one side only the
newest line of each pair key counts (the rule of schema/results.py: the newest timestamp, a tie
going to the line read later).

Lines are paired by (definition, solution, env, workload uuid); with `across_envs` the env is
left out of the key (one side's env against the other's, say a compiler upgrade), and a side
that holds one solution and workload in two envs is refused. The sides may come from different
GPUs: pairs are compared all the same, and the summary says so when the GPU models differ.

Per pair: both statuses, the time ratio after/before and its 95% interval, and a verdict. The
ratio and its interval are those of `envaudit reproduce` (report/side_by_side.py `compare_runs`,
arithmetic in report/intervals.py, the report's one comparison rule): each line's graph median
where it has one, else its eager median (`mode` names both when they differ); each median's
uncertainty is its within-run standard error plus the run-to-run floor of its kind of figure
(1.6% for graph replays on one card, so one run per side gives about +-4.5%, and 6.3% across
cards; far wider for a host-bound or eager-only figure, whose caveat the pair's notes carry),
or the scatter of the side's repeated runs of the pair where that is wider. Per solution, the
geometric mean of after/before over its timed pairs, with its interval (`geomeans`): with
`--across-envs` on the same lines, the numbers and verdicts of the report's environment
comparison.

Verdicts, with T = threshold_pct / 100:
- "slower": the interval lies wholly above 1 + T; "faster": wholly below 1 - T;
- "within noise": otherwise;
- "newly failing": PASSED before, any other status after; "newly passing": the reverse;
- "lost": the before line PASSED and the after side has no line for it (the gate must not
  pass because a passing kernel stopped being run: a renamed env, a dropped workload);
- "missing": the pair is in one side only otherwise (`only_in` says which);
- "still failing": neither side PASSED (both statuses are shown);
- "not timed": both PASSED but they share no timing mode with a median;
- "timing flagged": both PASSED but the judge flagged the after line's timing (its own clock
  disagreed with the reported samples, or it witnessed no timed call: harness/witness.py), so
  its time says nothing; a flag on the before line only is a note on the pair.
A regression is "slower", "newly failing", "lost" or "timing flagged": the command then exits 1.

With T = 0 (the default) "slower" means what `reproduce` means by it: the interval excludes
1.0. A larger T asks for a change that is both beyond noise and larger than T: with one run per
side of graph figures on one card the interval's lower end is about ratio / 1.045, so T = 2%
flags only ratios above ~1.066.
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError
from envaudit.report.intervals import geomean_ratio, observed_of
from envaudit.report.merge import UnreadableInputs, merge_files
from envaudit.report.side_by_side import run_timing
from envaudit.report.summary import gpu_model_of
from envaudit.report.traces import trace_to_line
from envaudit.schema.result_line import ResultLine
from envaudit.schema.results import newest_per_key
from envaudit.schema.writes import replace_text

DEFAULT_THRESHOLD_PCT = 0.0
REPORT_FILE = "results.jsonl"
VERDICTS = (
    "faster",
    "slower",
    "within noise",
    "newly failing",
    "newly passing",
    "missing",
    "lost",
    "still failing",
    "not timed",
    "timing flagged",
)
"""In the summary's order; the first six are always counted, the rest when they occur."""
ORDER = (
    "newly failing",
    "lost",
    "timing flagged",
    "slower",
    "missing",
    "newly passing",
    "still failing",
    "not timed",
    "faster",
    "within noise",
)
"""The order of rows: regressions first, then what a reviewer should look at."""
REGRESSIONS = ("slower", "newly failing", "lost", "timing flagged")
INPUTS_HINT = (
    "each side is a result file (.jsonl), a report folder holding results.jsonl"
    " (`envaudit merge --out DIR`), or a file of FlashInfer-Bench traces"
)
PAIRED_BY = "definition, solution, env and workload uuid"
PAIRED_ACROSS_ENVS = "definition, solution and workload uuid (--across-envs: the env is not part)"


class PairKey(NamedTuple):
    definition: str
    solution: str
    env: str
    """Empty when pairing across envs."""
    workload: str


@dataclass
class Side:
    """One side as read: the file, the line that counts per pair key, what reading found."""

    path: Path
    lines: dict[PairKey, ResultLine]
    findings: list[str] = field(default_factory=list)
    older: int = 0
    """Lines left out because a newer line of the same pair key was read."""
    observed: dict[PairKey, float | None] = field(default_factory=dict)
    """The scatter of each pair key's repeated runs (those of the counted line's closure and
    GPU model), as the report widens an interval by it (report/intervals.py `observed_of`)."""


@dataclass
class Pair:
    """One pair as the outputs show it; every list is [before, after]. `ratio` is after/before
    of the medians of `mode` (None without a timing both lines share), `ci95` its interval,
    `source` the FILE:LINE each line was read from."""

    definition: str
    solution: str
    workload: str
    label: str | None
    env: list[str | None]
    status: list[str | None]
    verdict: str
    only_in: str | None = None
    mode: str | None = None
    median_ms: list[float | None] = field(default_factory=lambda: [None, None])
    ratio: float | None = None
    ci95: list[float] | None = None
    gpu: list[str | None] = field(default_factory=lambda: [None, None])
    gpu_differs: bool = False
    notes: list[str] = field(default_factory=list)
    source: list[str | None] = field(default_factory=lambda: [None, None])
    flags: list[list[str]] = field(default_factory=lambda: [[], []])
    """The judge's timing flags of each line (empty where it trusted the time)."""
    log_variance: float | None = None
    """The variance of log `ratio` (what its interval and the geometric mean stand on)."""


@dataclass
class GeomeanRow:
    """One solution's geometric mean of after/before over its pairs both sides timed (PASSED,
    unflagged), with its 95% interval: the one comparison rule's aggregate, as the report's
    environment comparison gives it."""

    definition: str
    solution: str
    env: list[str | None]
    """[before, after] (one env each when pairing across envs)."""
    workloads: int
    ratio: float
    ci95: list[float] | None
    within_noise: bool | None
    verdict: str


@dataclass
class Comparison:
    before: str
    after: str
    paired_by: str
    threshold_pct: float
    pairs: list[Pair]
    counts: dict[str, int]
    notes: list[str]
    geomeans: list[GeomeanRow] = field(default_factory=list)
    """Per solution; informational: the exit code is the pairs'."""

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if any(self.counts.get(v) for v in REGRESSIONS) else EXIT_OK

    def summary_line(self) -> str:
        shown = [*VERDICTS[:6], *(v for v in VERDICTS[6:] if self.counts.get(v))]
        parts = ", ".join(f"{self.counts.get(v, 0)} {v}" for v in shown)
        return f"{len(self.pairs)} pairs: {parts}"


# ---------------------------------------------------------------- reading


def read_side(spec: Path, across_envs: bool = False, accept_newer: bool = False) -> Side:
    """The newest line per pair key of a result file, a report folder or a trace file;
    EnvauditError (exit 2) naming the file when it holds no result line, cannot be read or
    holds lines of a newer schema version (unless `accept_newer`)."""
    path = _result_file(spec)
    try:
        merged = merge_files([path], convert=trace_to_line, accept_newer=accept_newer)
    except UnreadableInputs as exc:
        raise EnvauditError("; ".join(exc.problems), hint=INPUTS_HINT) from None
    findings = [f.render() for f in merged.findings]
    if not merged.runs:
        raise EnvauditError(
            f"{path}: holds no result line", hint=INPUTS_HINT, findings=findings[:5]
        )
    if across_envs:
        _refuse_two_envs(path, merged.runs)
    lines = newest_per_key(  # over every line read, in file order
        merged.runs, lambda line: pair_key(line, across_envs), lambda line: line.instant
    )
    runs: dict[PairKey, list[ResultLine]] = {}
    for line in merged.runs:
        runs.setdefault(pair_key(line, across_envs), []).append(line)
    observed = {
        key: observed_of(line, [r for r in runs[key] if _same_group(r, line)])
        for key, line in lines.items()
    }
    return Side(path, lines, findings, len(merged.runs) - len(lines), observed)


def _same_group(run: ResultLine, line: ResultLine) -> bool:
    """Runs of one measurement, as the report groups them: one closure, one GPU model."""
    return (run.closure_hash, gpu_model_of(run)) == (line.closure_hash, gpu_model_of(line))


def _result_file(spec: Path) -> Path:
    if not spec.is_dir():
        return spec  # merge_files names a missing or unreadable file
    inside = spec / REPORT_FILE
    if not inside.exists() and not inside.is_symlink():
        raise EnvauditError(f"{spec}: a folder without {REPORT_FILE}", hint=INPUTS_HINT)
    return inside


def pair_key(line: ResultLine, across_envs: bool = False) -> PairKey:
    env = "" if across_envs else str(line.context.env or "")
    return PairKey(line.definition, line.solution, env, line.workload.uuid)


def _refuse_two_envs(path: Path, lines: Iterable[ResultLine]) -> None:
    envs: dict[PairKey, set[str]] = {}
    for line in lines:
        envs.setdefault(pair_key(line, True), set()).add(str(line.context.env or ""))
    for key, found in envs.items():
        if len(found) > 1:
            raise EnvauditError(
                f"{path}: {key.solution} / {key.workload} was run in {len(found)} envs"
                f" ({', '.join(sorted(found))}); --across-envs pairs one env per side",
                hint="compare without --across-envs, or give each side the lines of one env",
            )


# ---------------------------------------------------------------- comparing


def compare_sides(
    before: Side,
    after: Side,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    across_envs: bool = False,
) -> Comparison:
    """Every pair key of either side with its verdict, regressions first."""
    if not math.isfinite(threshold_pct) or not 0 <= threshold_pct < 100:
        raise EnvauditError(
            f"--threshold must be a percentage from 0 to under 100, got {threshold_pct}"
        )
    pairs = [
        make_pair(
            before.lines.get(key),
            after.lines.get(key),
            threshold_pct,
            (before.observed.get(key), after.observed.get(key)),
        )
        for key in sorted(before.lines.keys() | after.lines.keys())
    ]
    pairs.sort(key=lambda p: (ORDER.index(p.verdict), p.definition, p.solution, _row(p)))
    return Comparison(
        before=str(before.path),
        after=str(after.path),
        paired_by=PAIRED_ACROSS_ENVS if across_envs else PAIRED_BY,
        threshold_pct=threshold_pct,
        pairs=pairs,
        counts=counts_of(pairs),
        notes=_notes(before, after, pairs, threshold_pct, across_envs),
        geomeans=geomeans(pairs, threshold_pct),
    )


def geomeans(pairs: Iterable[Pair], threshold_pct: float) -> list[GeomeanRow]:
    """Per (definition, solution, envs): the geometric mean of after/before over the pairs
    with a time both sides' judges trusted (report/intervals.py `geomean_ratio`)."""
    groups: dict[tuple[str, str, str | None, str | None], list[Pair]] = {}
    for pair in pairs:
        timed = pair.verdict in ("faster", "slower", "within noise") and pair.ratio is not None
        if timed and pair.log_variance is not None and not pair.flags[0]:
            key = (pair.definition, pair.solution, pair.env[0], pair.env[1])
            groups.setdefault(key, []).append(pair)
    rows = []
    for (definition, solution, *envs), found in sorted(groups.items(), key=lambda i: str(i[0])):
        ratio = geomean_ratio(
            [float(p.ratio or 0.0) for p in found], [float(p.log_variance or 0.0) for p in found]
        )
        if ratio is None:
            continue
        rows.append(
            GeomeanRow(
                definition=definition,
                solution=solution,
                env=list(envs),
                workloads=len(found),
                ratio=ratio.value,
                ci95=ratio.ci95,
                within_noise=ratio.within_noise,
                verdict=verdict("PASSED", "PASSED", ratio.ci95, threshold_pct),
            )
        )
    return rows


def _row(pair: Pair) -> tuple[str, str, str]:
    return (pair.label or pair.workload, pair.workload, env_text(pair))


def make_pair(
    before: ResultLine | None,
    after: ResultLine | None,
    threshold_pct: float,
    observed: tuple[float | None, float | None] = (None, None),
) -> Pair:
    """One pair's figures and verdict; one of the lines may be None (missing). `observed`:
    the scatter of each side's repeated runs of the pair, which widens the interval where it
    is wider than the floor."""
    either = before if before is not None else after
    assert either is not None
    pair = Pair(
        definition=either.definition,
        solution=either.solution,
        workload=either.workload.uuid,
        label=either.workload.label,
        env=[_env(before), _env(after)],
        status=[_status(before), _status(after)],
        verdict="missing",
        gpu=[_gpu_model(before), _gpu_model(after)],
        source=[_source(before), _source(after)],
        flags=[_flags(before), _flags(after)],
    )
    if before is None or after is None:
        pair.only_in = "after" if before is None else "before"
        if after is None and pair.status[0] == "PASSED":
            pair.verdict = "lost"
        return pair
    pair.gpu_differs = pair.gpu[0] != pair.gpu[1]
    timing = run_timing(before, after, observed)
    if timing is not None:
        pair.mode = timing.mode
        pair.median_ms = [float(v) for v in timing.median_ms]
        pair.ratio = timing.ratio_now_then
        pair.ci95 = list(timing.ci95)
        pair.log_variance = timing.log_variance
        if timing.modes_then != timing.modes_now:
            pair.notes.append(
                f"timed differently: {timing.modes_then} before, {timing.modes_now} after"
            )
        pair.notes += timing.caveats
    if pair.gpu_differs:
        pair.notes.append(f"GPU model differs: {pair.gpu[0]} before, {pair.gpu[1]} after")
    pair.verdict = verdict(pair.status[0], pair.status[1], pair.ci95, threshold_pct)
    if pair.verdict not in ("newly failing", "newly passing", "still failing"):
        if pair.flags[1]:
            pair.verdict = "timing flagged"
        if pair.flags[0]:
            pair.notes.append("before's timing was flagged: " + "; ".join(pair.flags[0]))
    return pair


def verdict(
    before: str | None, after: str | None, ci95: Sequence[float] | None, threshold_pct: float
) -> str:
    """The verdict of one pair from its statuses and the interval of after/before."""
    if before is None or after is None:
        return "missing"
    passed_before, passed_after = before == "PASSED", after == "PASSED"
    if passed_before != passed_after:
        return "newly failing" if passed_before else "newly passing"
    if not passed_before:
        return "still failing"
    if not ci95:
        return "not timed"
    margin = threshold_pct / 100
    low, high = ci95
    if low > 1 + margin:
        return "slower"
    if high < 1 - margin:
        return "faster"
    return "within noise"


def _env(line: ResultLine | None) -> str | None:
    return None if line is None else line.context.env


def _status(line: ResultLine | None) -> str | None:
    return None if line is None else line.status


def _gpu_model(line: ResultLine | None) -> str | None:
    return None if line is None else line.environment.gpu_name


def _flags(line: ResultLine | None) -> list[str]:
    timing = None if line is None else line.timing
    return list(timing.flags or []) if timing is not None else []


def _source(line: ResultLine | None) -> str | None:
    return None if line is None else line.source


def _notes(
    before: Side, after: Side, pairs: list[Pair], threshold_pct: float, across_envs: bool
) -> list[str]:
    notes = [f"paired by {PAIRED_ACROSS_ENVS if across_envs else PAIRED_BY}"]
    for name, side in (("before", before), ("after", after)):
        older = f", {side.older} older lines of the same pairs left out" if side.older else ""
        notes.append(f"{name}: {side.path} ({len(side.lines)} pair keys{older})")
    bounds = (
        f"1 + {threshold_pct:g}% / below 1 - {threshold_pct:g}%" if threshold_pct else "/ below 1"
    )
    notes.append(
        f"slower / faster: the 95% interval of after/before lies wholly above {bounds}"
        " (graph medians where both sides have them, else eager)"
    )
    models = [sorted({str(m) for m in _models(side)}) for side in (before, after)]
    if models[0] != models[1]:
        notes.append(
            f"the sides ran on different GPU models (before: {', '.join(models[0])}; after:"
            f" {', '.join(models[1])}): pairs are compared all the same, and flagged"
        )
    envs = [{k.env for k in side.lines} for side in (before, after)]
    if not across_envs and not any(p.only_in is None for p in pairs) and envs[0] != envs[1]:
        notes.append(
            f"no pair is in both sides: they ran in different envs (before:"
            f" {', '.join(sorted(envs[0]))}; after: {', '.join(sorted(envs[1]))});"
            " --across-envs pairs them by definition, solution and workload"
        )
    return notes


def _models(side: Side) -> set[str | None]:
    return {line.environment.gpu_name for line in side.lines.values()}


# ---------------------------------------------------------------- rendering


def as_dict(comparison: Comparison) -> dict[str, Any]:
    return {
        "before": comparison.before,
        "after": comparison.after,
        "paired_by": comparison.paired_by,
        "threshold_pct": comparison.threshold_pct,
        "summary": {
            "pairs": len(comparison.pairs),
            "counts": comparison.counts,
            "line": comparison.summary_line(),
            "regression": comparison.exit_code == EXIT_FAILED,
            "exit_code": comparison.exit_code,
        },
        "notes": comparison.notes,
        "pairs": [asdict(p) for p in comparison.pairs],
        "geomeans": [asdict(g) for g in comparison.geomeans],
    }


def render_json(comparison: Comparison) -> str:
    return json.dumps(as_dict(comparison), indent=1) + "\n"


def ratio_text(pair: Pair) -> str:
    """`1.0123 [0.9681, 1.0585]`, or a dash when the pair has no shared timing."""
    if pair.ratio is None:
        return "–"
    bounds = f" [{pair.ci95[0]:.4f}, {pair.ci95[1]:.4f}]" if pair.ci95 else ""
    return f"{pair.ratio:.4f}{bounds}"


def status_text(pair: Pair) -> str:
    before, after = (s or "–" for s in pair.status)
    return before if before == after else f"{before} → {after}"


def verdict_text(pair: Pair) -> str:
    if pair.verdict == "lost":
        return "lost (PASSED before, no line after)"
    if pair.only_in:
        return f"missing (only {pair.only_in})"
    flagged = f": {'; '.join(pair.flags[1])}" if pair.verdict == "timing flagged" else ""
    return pair.verdict + flagged + (" (GPU differs)" if pair.gpu_differs else "")


def render_markdown(comparison: Comparison) -> str:
    """A table for a GitHub step summary or a PR comment: regressions first."""
    found = [f"{comparison.counts[v]} {v}" for v in REGRESSIONS if comparison.counts[v]]
    title = ", ".join(found) if found else "no regression"
    rows = [f"### envaudit compare: {title}", "", f"**{comparison.summary_line()}**", ""]
    rows += [f"- {_cell(note)}" for note in comparison.notes]
    rows += [
        "",
        "| verdict | solution | workload | env | status | median ms (before → after)"
        " | after/before [95% interval] | timing |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for pair in comparison.pairs:
        medians = " → ".join("–" if m is None else f"{m:.4g}" for m in pair.median_ms)
        cells = (
            verdict_text(pair),
            pair.solution,
            pair.label or pair.workload,
            env_text(pair),
            status_text(pair),
            medians,
            ratio_text(pair),
            pair.mode or "–",
        )
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    if comparison.geomeans:
        rows += [
            "",
            "| solution | env | workloads | geometric mean after/before [95% interval] | verdict |",
            "|---|---|---:|---|---|",
        ]
        for geo in comparison.geomeans:
            shown = [geo.solution, _envs(geo.env), str(geo.workloads), geomean_text(geo)]
            rows.append("| " + " | ".join(_cell(c) for c in [*shown, geo.verdict]) + " |")
    return "\n".join(rows) + "\n"


def geomean_text(geo: GeomeanRow) -> str:
    """`0.9946 [0.9681, 1.0218]`: the geometric mean of after/before with its interval."""
    bounds = f" [{geo.ci95[0]:.4f}, {geo.ci95[1]:.4f}]" if geo.ci95 else ""
    return f"{geo.ratio:.4f}{bounds}"


def geomean_line(geo: GeomeanRow) -> str:
    """One line for the terminal: whose geometric mean, over how many pairs, and its verdict."""
    return (
        f"geometric mean {geo.solution} ({_envs(geo.env)}), {geo.workloads} workloads:"
        f" after/before {geomean_text(geo)}, {geo.verdict}"
    )


def _envs(envs: Sequence[str | None]) -> str:
    return " → ".join(dict.fromkeys(e for e in envs if e)) or "–"


def env_text(pair: Pair) -> str:
    """One env, or `before → after` when the pair was made across envs."""
    return _envs(pair.env)


def _cell(text: str) -> str:
    """Markdown table cell text: pipes escaped, on one line."""
    return " ".join(text.replace("|", "\\|").split())


# ---------------------------------------------------------------- JUnit

_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def render_junit(comparison: Comparison) -> str:
    """JUnit XML: one testcase per pair; a failure for slower and newly failing, skipped for
    missing."""
    counts = comparison.counts
    totals = {
        "tests": str(len(comparison.pairs)),
        "failures": str(sum(counts[v] for v in REGRESSIONS)),
        "errors": "0",
        "skipped": str(counts["missing"]),
    }
    suites = ET.Element("testsuites", {"name": "envaudit compare", **totals})
    suite = ET.SubElement(suites, "testsuite", {"name": "envaudit compare", **totals})
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("before", comparison.before),
        ("after", comparison.after),
        ("paired_by", comparison.paired_by),
        ("threshold_pct", f"{comparison.threshold_pct:g}"),
    ):
        ET.SubElement(properties, "property", {"name": name, "value": _xml(value)})
    for pair in comparison.pairs:
        _testcase(suite, pair)
    ET.SubElement(suite, "system-out").text = _xml(
        "\n".join([comparison.summary_line(), *comparison.notes])
    )
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


def _testcase(suite: ET.Element, pair: Pair) -> None:
    env = env_text(pair)
    case = ET.SubElement(
        suite,
        "testcase",
        {
            "classname": _xml(pair.definition),
            "name": _xml(f"{pair.solution} / {pair.label or pair.workload} [{env}]"),
        },
    )
    message = f"{verdict_text(pair)}: status {status_text(pair)}; after/before {ratio_text(pair)}"
    details = _xml(json.dumps(asdict(pair), indent=1))
    if pair.verdict in REGRESSIONS:
        failure = ET.SubElement(case, "failure", {"type": pair.verdict, "message": _xml(message)})
        failure.text = details
    elif pair.verdict == "missing":
        ET.SubElement(case, "skipped", {"message": _xml(message)})
    else:
        ET.SubElement(case, "system-out").text = _xml(message)


def _xml(text: str) -> str:
    """Text XML 1.0 can hold (control characters dropped; ElementTree escapes the rest)."""
    return _NOT_XML.sub("", text)


def write_junit(comparison: Comparison, path: Path) -> Path:
    """The JUnit file, replaced atomically (WriteFailed, exit 2, when it cannot be written)."""
    return replace_text(path, render_junit(comparison))


def counts_of(pairs: Iterable[Pair]) -> dict[str, int]:
    """Pairs per verdict (every verdict named, zero where none)."""
    found = Counter(p.verdict for p in pairs)
    return {v: found.get(v, 0) for v in VERDICTS}
