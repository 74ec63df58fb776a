"""performance.md: the summary as tables a person reads in a minute, with its provenance."""

from __future__ import annotations

from collections.abc import Sequence

from envaudit.report.glance import (
    ENV_COMPARISON_INTRO,
    SPEEDUP_RULE,
    cell_text,
    choice_rows,
    differ_in_text,
    env_rows,
    interface_rows,
    interval_caption,
    interval_text,
    median_text,
    reproduce_command,
    short_name,
    stand_in_notes,
)
from envaudit.report.plots import short_gpu, speedup_plot
from envaudit.schema.interfaces import Interface
from envaudit.schema.summary import (
    DefinitionBlock,
    EnvComparison,
    Preferred,
    SolutionBlock,
    Summary,
    WorkloadRow,
)


def _num(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if abs(value) < 1000 else f"{value:.0f}"


def _short(text: str | None, n: int = 12) -> str:
    return "–" if not text else str(text)[:n]


def render_markdown(
    summary: Summary,
    preferred: Preferred,
    interfaces: Sequence[Interface],
    command: str,
) -> str:
    parts = [
        "# Performance report\n",
        f"Generated {summary.generated_at} by `{command}` from {summary.lines} result lines.",
        f"{SPEEDUP_RULE} Roofline fraction: achieved over attainable at the GPU's dense BF16"
        " peak and HBM bandwidth.\n",
        _overview(summary, preferred),
        _provenance(summary),
        _reproduce(summary),
        *(_definition(name, block, summary) for name, block in summary.definitions.items()),
        _env_comparisons(summary.env_comparisons),
        _interfaces(interfaces),
        _findings(summary),
    ]
    return "\n".join(p for p in parts if p) + "\n"


def _gpu_label(summary: Summary, device: str) -> str:
    found = summary.devices.get(device)
    uuids = found.uuids if found is not None else []
    cards = ", ".join(u[:12] for u in uuids if u.startswith(("GPU-", "MIG-")))
    return f"{device} ({cards})" if cards else device


def _overview(summary: Summary, preferred: Preferred) -> str:
    """Per GPU model, one row per definition and comparison: the choice on equal footing."""
    rows = ["## At a glance\n"]
    for model in summary.models():
        rows += [
            f"{_gpu_label(summary, model)}:\n",
            "| definition | passed | workloads compared | preferred | speedup [95% CI] | runner-up"
            " | left out |",
            "|---|---|---|---|---:|---|---|",
        ]
        for name, block in summary.definitions.items():
            if model not in block.devices:
                continue
            choice = preferred.choices[name][model]
            for row in choice_rows(name, block.devices[model], choice):
                runs = f"{row.passed}/{row.total} runs, {row.workloads} workloads"
                head = f"{name} | {runs}" if row.first else "″ | ″"
                best = row.preferred if row.speedup is None else f"`{row.preferred}`"
                rows.append(
                    f"| {head} | {row.compared} | {best} | {row.speedup_text}"
                    f" | {row.runner_up} | {'; '.join(row.left_out) or '–'} |"
                )
        rows.append("")
    rows.append(f"Rule: {preferred.rule}.\n")
    return "\n".join(rows)


def _provenance(summary: Summary) -> str:
    rows = ["## Provenance\n"]
    if summary.measured_between:
        first, last = summary.measured_between
        rows.append(f"Measured between {first} and {last}.\n")
    rows += ["| GPU model | cards (UUID) | compute capability |", "|---|---|---|"]
    for model, gpu in summary.devices.items():
        cards = ", ".join(f"`{u}`" for u in gpu.uuids) or "–"
        rows.append(f"| {model} | {cards} | {gpu.compute_capability or '–'} |")
    rows += [
        "",
        "| env | closure hash | runtime | image | python | torch | triton | distributions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for env in summary.environments:
        closure = (
            f"`{env.closure_hash}`"
            if env.closure_hash
            else "none (host interpreter, not a built lock)"
        )
        fingerprints = ", ".join(f"`{f[:12]}`" for f in env.distributions_fingerprints)
        rows.append(
            f"| {env.env} | {closure} | {env.runtime} | {env.image_id or '–'} | {env.python}"
            f" | {env.torch} | {env.triton or '–'} | {fingerprints} |"
        )
    notes = stand_in_notes(summary)
    if notes:
        rows.append("")
        rows += [f"- {note}" for note in notes]
    hashes = ", ".join(f"`{h[:16]}`" for h in summary.harness_hashes)
    rows.append(f"\nHarness revisions (harness_hash): {hashes}.\n")
    return "\n".join(rows)


def _reproduce(summary: Summary) -> str:
    """One `envaudit reproduce results.jsonl:N` per environment and GPU model (its first line):
    reproduce reads the line's lock by closure hash and solution revision by hash, so the
    command cannot drift from what was run. Every row of report.html carries its own."""
    rows = [
        "## How to reproduce\n",
        "`envaudit reproduce RESULTS:N` runs line N of this report's results.jsonl again in",
        "what it records (its lock by closure hash, its solution revision by hash, a GPU of its",
        "model) and prints both side by side with the ratio's interval; report.html gives the",
        "command for every row. Each runs as printed from the folder `envaudit merge` ran in",
        "(for a report committed to a repository, its root). One line per environment and GPU",
        "model:\n",
    ]
    first: dict[tuple[str, str], tuple[int, str]] = {}
    imported: set[str] = set()
    for name, block in summary.definitions.items():
        for model, dblock in block.devices.items():
            for entry in dblock.solutions:
                if entry.runtime == "flashinfer-bench":
                    imported.add(entry.env)
                    continue
                for row in entry.per_workload:
                    number = row.results_line
                    key = (entry.env, model)
                    if number and (key not in first or number < first[key][0]):
                        first[key] = (number, f"{entry.solution}, {row.label or name}")
    for (env, model), (number, what) in sorted(first.items()):
        rows.append(f"- {env} on {model}: `{reproduce_command(summary, number)}` ({what})")
    for env in sorted(imported):  # imported traces: no runtime of ours made them
        rows.append(
            f"- {env}: measured by FlashInfer-Bench (imported traces); envaudit cannot repeat"
            " that run as recorded: `envaudit run --solution <solution> --gpu GPU-<uuid>"
            " --suite dev --graph-timing` runs it in the env it declares"
        )
    return "\n".join(rows) + "\n"


def _definition(name: str, block: DefinitionBlock, summary: Summary) -> str:
    """One definition: its figures first (the quickest read), then per GPU model the solutions
    and the workloads, one figure per cell, and what the intervals stand on."""
    rows = [f"## {name}\n"]
    rows += _plot_links(name, block)
    rows.append(f"Baseline: `{block.baseline or 'none declared'}`.\n")
    for device, dblock in block.devices.items():
        rows.append(f"{_gpu_label(summary, device)}:\n")
        rows += _solution_table(name, dblock.solutions)
        rows += _workload_table(name, dblock.solutions)
    rows.append(interval_caption() + "\n")
    return "\n".join(rows)


def _plot_links(name: str, block: DefinitionBlock) -> list[str]:
    """The speedup figure of each GPU model that has one (plots.speedup_plot names the file
    render_plots writes, and None where it writes none)."""
    links = []
    for device, dblock in block.devices.items():
        path = speedup_plot(name, device, dblock.solutions)
        if path is not None:
            links.append(f"![{name}: speedup per workload, {short_gpu(device)}]({path})\n")
    return links


def _solution_table(name: str, solutions: Sequence[SolutionBlock]) -> list[str]:
    rows = [
        "| solution | env | passed | geomean speedup | 95% CI | roofline |",
        "|---|---|---|---:|---|---:|",
    ]
    for entry in solutions:
        geo = entry.geomean_speedup
        rows.append(
            f"| `{short_name(entry.solution, name)}` | {entry.env}{_env_warning(entry)}"
            f" | {_passed(entry)} | {_times(geo.primary)} | {_ci(geo.primary_ci95)}"
            f" | {_num(entry.roofline_fraction_median, 2)} |"
        )
    return [*rows, ""]


def _passed(entry: SolutionBlock) -> str:
    """ "4/5 (RUNTIME_ERROR 1)": passed over run, then each failed status with its count."""
    counts = entry.workloads
    failed = ", ".join(f"{k} {v}" for k, v in counts.failed.items())
    return f"{counts.passed}/{counts.total}" + (f" ({failed})" if failed else "")


def _workload_table(name: str, solutions: Sequence[SolutionBlock]) -> list[str]:
    """Long form, one row per (workload, solution), workloads in the summary's (label, uuid)
    order; a workload's name is written once, a ditto mark below it."""
    rows = [
        "| workload | solution | status | graph median ms ±IQR/2 | eager median ms ±IQR/2"
        " | speedup | 95% CI | notes |",
        "|---|---|---|---:|---:|---:|---|---|",
    ]
    labels = _solution_labels(name, solutions)
    previous = None
    for key, label, entry, row in _workload_rows(solutions, labels):
        workload = "″" if key == previous else cell_text(row.name)
        previous = key
        rows.append(f"| {workload} | {label} | {_row_cells(entry, row)} |")
    return [*rows, ""]


def _solution_labels(name: str, solutions: Sequence[SolutionBlock]) -> list[str]:
    """Short names, with the env where one solution appears in several envs on this GPU."""
    shorts = [short_name(e.solution, name) for e in solutions]
    return [
        f"`{short}`" + (f" ({e.env})" if shorts.count(short) > 1 else "")
        for short, e in zip(shorts, solutions, strict=True)
    ]


def _workload_rows(
    solutions: Sequence[SolutionBlock], labels: Sequence[str]
) -> list[tuple[tuple[str, str], str, SolutionBlock, WorkloadRow]]:
    """(workload key, solution label, entry, row), by workload then in the solutions' order."""
    found = [
        ((row.label or "", row.uuid), index, label, entry, row)
        for index, (label, entry) in enumerate(zip(labels, solutions, strict=True))
        for row in entry.per_workload
    ]
    found.sort(key=lambda item: (item[0], item[1]))
    return [(key, label, entry, row) for key, _, label, entry, row in found]


def _row_cells(entry: SolutionBlock, row: WorkloadRow) -> str:
    """status | graph ms | eager ms | speedup | 95% CI | notes; a baseline's speedup is 1.00x by
    definition and has no interval of its own."""
    status = "PASSED" if row.passed else f"**{row.status}**"
    if row.timing_flags:
        status += " **timing flagged**"
    speedup = row.speedup_primary if row.passed else None
    bounds = None if entry.baseline else row.speedup_ci95
    if speedup and entry.baseline:
        speedup = 1.0
    modes = row.primary_timing
    shown = _times(speedup) + (f" ({modes})" if speedup and modes and not entry.baseline else "")
    return (
        f"{status} | {median_text(row.graph_median_ms, row.graph_iqr_ms)}"
        f" | {median_text(row.eager_median_ms, row.eager_iqr_ms)}"
        f" | {shown} | {_ci(bounds)} | {_notes(row, entry.baseline)}"
    )


def _times(value: float | None) -> str:
    return f"{_num(value, 2)}x" if value else "–"


def _ci(bounds: Sequence[float] | None) -> str:
    """ "[2.31, 2.47]", "[0.98, 1.04] within noise" (the interval holds 1.0), "–" without one."""
    if not bounds:
        return "–"
    return interval_text(bounds) + (" within noise" if bounds[0] <= 1.0 <= bounds[1] else "")


def _notes(row: WorkloadRow, baseline: bool = False) -> str:
    notes = [
        note for note in ("; ".join(row.timing_flags), _strict(row), _scale_probe(row)) if note
    ]
    if not baseline:
        notes += [cell_text(c) for c in row.speedup_caveats]
        if row.baseline_results_line:
            notes.append(f"vs baseline line {row.baseline_results_line}")
    return "; ".join(notes) or "–"


def _strict(row: WorkloadRow) -> str:
    """The strict diagnostic bound (--strict-diagnostic), where the line has one."""
    if row.strict_holds is None:
        return ""
    if row.strict_holds:
        return "strict bound holds"
    factor = row.strict_factor
    return f"strict bound missed ({factor:.3g}x)" if factor else "strict bound missed"


def _scale_probe(row: WorkloadRow) -> str:
    """The scale probe (--scale-probe): per factor, passed or the status, and the largest
    absolute error, e.g. "scale x0.1 ok 2e-05, x1 ok 0.0039, x10 INCORRECT_NUMERICAL 0.5"."""
    if not row.scale_probe:
        return ""
    cells = []
    for point in row.scale_probe:
        name = f"x{point.factor:g}"
        if point.status == "skipped":
            cells.append(f"{name} skipped")
            continue
        verdict = "ok" if point.status == "PASSED" else point.status
        error = point.max_absolute_error
        cells.append(f"{name} {verdict}" + (f" {error:.2g}" if error is not None else ""))
    return "scale " + ", ".join(cells)


def _env_warning(entry: SolutionBlock) -> str:
    """A visible mark on figures measured outside the declared environment."""
    check = entry.declared_env_check
    if check is None or check.matches:
        return ""
    parts = [f"python {check.python[1]}"] if check.python else []
    parts += [f"missing {m}" for m in check.missing[:3]]
    parts += [f"{d}" for d in check.different[:3]]
    return " **(not the declared env: " + "; ".join(parts) + ")**"


def _env_comparisons(comparisons: Sequence[EnvComparison]) -> str:
    """Solutions run in several envs on one GPU model: the time ratio with its interval, per
    workload and as a geometric mean (report/env_compare.py, by the one comparison rule)."""
    if not comparisons:
        return ""
    parts = ["## Environment comparisons\n", ENV_COMPARISON_INTRO + "\n"]
    for item in comparisons:
        parts.append(f"### `{item.solution}`: {item.other} vs {item.base}\n")
        parts.append(cell_text(differ_in_text(item)) + "\n")
        parts.append(f"{item.gpu_model}:\n")
        parts.append(env_table(item) + "\n")
    return "\n".join(parts)


def env_table(item: EnvComparison) -> str:
    """One environment comparison as a Markdown table."""
    names = (item.base, item.other)
    lines = [
        f"| workload | timing ({names[1]}/{names[0]}) | runs ({names[0]}, {names[1]})"
        f" | results lines | {names[1]}/{names[0]} | 95% CI | verdict |",
        "|---|---|---|---|---:|---|---|",
    ]
    for row in env_rows(item):
        cells = (row.workload, row.modes, row.runs, row.lines, row.ratio, row.ci, row.verdict)
        lines.append("| " + " | ".join(cell_text(c) for c in cells) + " |")
    return "\n".join(lines)


def _interfaces(interfaces: Sequence[Interface]) -> str:
    if not interfaces:
        return ""
    rows = [
        "## Native calls these definitions stand for\n",
        "| definition | native call | pinned source | drop-in | integration work left |",
        "|---|---|---|---|---|",
    ]
    for item in interface_rows(interfaces):
        rows.append(
            f"| {item.definition} | {item.library} `{item.function}` | {item.pinned}"
            f" | {item.drop_in} | {item.work} |"
        )
    return "\n".join(rows) + "\n"


def _findings(summary: Summary) -> str:
    rows = ["## Input findings\n"]
    rows += [f"- {f}" for f in summary.findings] or ["- none"]
    if summary.conflicts:
        rows.append("\nConflicting duplicates (newest kept):\n")
        rows += [f"- {c.text}" for c in summary.conflicts]
    rows.append(f"\nRepeated measurements replaced by a newer one: {summary.repeats_dropped}.")
    return "\n".join(rows)
