"""report.html: the report as one self-contained page (inline CSS, script and plots; nothing is
fetched), for reading in a browser: sortable and filterable tables, status colours, the
provenance of every figure on hover and the command that runs each line again.

The page is rendered by Jinja2 from templates/report.html.j2 (autoescaped: solution, workload
and env names come from data). It reads the same summary and choices as performance.md, so the
two never disagree. Its script sorts a table on a header click, filters rows as you type, and
applies `#sort=TABLE:COLUMN:asc|desc` and `#filter=TEXT` from the address on load, so a view can
be linked (and tested in a headless browser).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from envaudit.report.glance import (
    ENV_COMPARISON_INTRO,
    SPEEDUP_RULE,
    EnvRow,
    GlanceRow,
    choice_rows,
    differ_in_text,
    env_rows,
    interface_rows,
    interval_caption,
    interval_text,
    median_text,
    plain_text,
    reproduce_command,
    short_name,
    speedup_text,
    stand_in_notes,
)
from envaudit.report.plots import speedup_plot
from envaudit.schema.interfaces import Interface
from envaudit.schema.summary import (
    DefinitionBlock,
    EnvComparison,
    Preferred,
    SolutionBlock,
    Summary,
    WorkloadRow,
)

TEMPLATE = "report.html.j2"


@dataclass(frozen=True)
class ModelView:
    """At a glance for one GPU model."""

    name: str
    cards: list[str]
    rows: list[GlanceRow]


@dataclass(frozen=True)
class SolutionView:
    name: str
    full_name: str
    env: str
    baseline: bool
    passed: int
    total: int
    failed: str
    speedup: float | None
    speedup_text: str
    compared: int
    roofline: float | None
    provenance: str


@dataclass(frozen=True)
class RowView:
    workload: str
    uuid: str
    solution: str
    status: str
    flags: str
    graph_ms: float | None
    eager_ms: float | None
    graph_text: str
    eager_text: str
    """The median with its spread, as shown (glance.median_text); the numbers sort."""
    speedup: float | None
    ci: str
    modes: str | None
    caveats: str
    provenance: str
    reproduce: str


@dataclass(frozen=True)
class DeviceView:
    name: str
    plot: str | None
    solutions: list[SolutionView]
    rows: list[RowView]


@dataclass(frozen=True)
class DefinitionView:
    name: str
    baseline: str | None
    devices: list[DeviceView]


@dataclass(frozen=True)
class EnvComparisonView:
    title: str
    differ_in: str
    gpu_model: str
    ratio_name: str
    runs_name: str
    rows: list[EnvRow]


def render_html(
    summary: Summary,
    preferred: Preferred,
    plots: Mapping[Path, bytes],
    out: Path,
    command: str,
    interfaces: Sequence[Interface] = (),
) -> str:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("envaudit.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    template = environment.get_template(TEMPLATE)
    return template.render(
        generated_at=summary.generated_at,
        command=command,
        lines=summary.lines,
        speedup_rule=SPEEDUP_RULE,
        interval_caption=interval_caption(),
        models=_models(summary, preferred),
        definitions=[
            _definition(n, b, plots, out, lambda number: reproduce_command(summary, number))
            for n, b in summary.definitions.items()
        ],
        devices=summary.devices,
        environments=summary.environments,
        stand_ins=stand_in_notes(summary),
        harness_hashes=summary.harness_hashes,
        env_intro=ENV_COMPARISON_INTRO,
        env_comparisons=[_env_comparison(item) for item in summary.env_comparisons],
        interfaces=interface_rows(interfaces),
        rule=preferred.rule,
    )


def _models(summary: Summary, preferred: Preferred) -> list[ModelView]:
    """At a glance, per GPU model: one row per definition and comparison."""
    views = []
    for model in summary.models():
        device = summary.devices.get(model)
        rows = [
            row
            for name, block in summary.definitions.items()
            if model in block.devices
            for row in choice_rows(name, block.devices[model], preferred.choices[name][model])
        ]
        views.append(ModelView(model, device.uuids if device is not None else [], rows))
    return views


def _definition(
    name: str,
    block: DefinitionBlock,
    plots: Mapping[Path, bytes],
    out: Path,
    reproduce: Callable[[int], str],
) -> DefinitionView:
    devices = []
    for model, dblock in block.devices.items():
        devices.append(
            DeviceView(
                name=model,
                plot=_inline_svg(plots, out, speedup_plot(name, model, dblock.solutions)),
                solutions=[_solution(name, entry) for entry in dblock.solutions],
                rows=[
                    _row(name, entry, row, reproduce)
                    for entry in dblock.solutions
                    for row in entry.per_workload
                ],
            )
        )
    return DefinitionView(name, block.baseline, devices)


def _inline_svg(plots: Mapping[Path, bytes], out: Path, png: str | None) -> str | None:
    """The plot as a data: URI (an <img> keeps each figure's ids apart from the page's)."""
    if png is None:
        return None
    data = plots.get(out / Path(png).with_suffix(".svg"))
    if data is None:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")


def _solution(definition: str, entry: SolutionBlock) -> SolutionView:
    geo = entry.geomean_speedup
    counts = entry.workloads
    if entry.baseline:
        text = "1.00x"
    else:
        text = speedup_text(geo.primary, geo.primary_ci95) if geo.primary else "–"
    return SolutionView(
        name=short_name(entry.solution, definition),
        full_name=entry.solution,
        env=entry.env,
        baseline=entry.baseline,
        passed=counts.passed,
        total=counts.total,
        failed=", ".join(f"{k} {v}" for k, v in counts.failed.items()),
        speedup=geo.primary,
        speedup_text=text,
        compared=geo.workloads_compared,
        roofline=entry.roofline_fraction_median,
        provenance=_provenance(entry),
    )


def _row(
    definition: str, entry: SolutionBlock, row: WorkloadRow, reproduce: Callable[[int], str]
) -> RowView:
    number = row.results_line
    own = not entry.baseline
    return RowView(
        workload=plain_text(row.name),
        uuid=row.uuid,
        solution=short_name(entry.solution, definition),
        status=row.status,
        flags="; ".join(row.timing_flags),
        graph_ms=row.graph_median_ms,
        eager_ms=row.eager_median_ms,
        graph_text=median_text(row.graph_median_ms, row.graph_iqr_ms),
        eager_text=median_text(row.eager_median_ms, row.eager_iqr_ms),
        speedup=row.speedup_primary if own else None,
        ci=interval_text(row.speedup_ci95) if own else "",
        modes=row.primary_timing if own else None,
        caveats="; ".join(row.speedup_caveats) if own else "",
        provenance=_provenance(entry, row),
        reproduce=reproduce(number) if number else "",
    )


def _provenance(entry: SolutionBlock, row: WorkloadRow | None = None) -> str:
    """What a hover shows: where the figure was measured and with what."""
    parts = [
        f"solution: {entry.solution}",
        f"env: {entry.env}",
        f"closure: {entry.closure_hash or 'none (host interpreter)'}",
        f"runtime: {entry.runtime}",
        f"image: {entry.image_id or '–'}",
    ]
    if row is not None:
        parts += [f"GPU: {row.device}", f"harness: {row.harness_hash or '–'}"]
        if row.baseline_results_line and not entry.baseline:
            where = row.baseline_device or "–"
            parts.append(f"baseline: results line {row.baseline_results_line} ({where})")
    else:
        parts.append("GPUs: " + ", ".join(entry.gpus))
    return "\n".join(parts)


def _env_comparison(item: EnvComparison) -> EnvComparisonView:
    return EnvComparisonView(
        title=f"{item.solution}: {item.other} vs {item.base}",
        differ_in=differ_in_text(item),
        gpu_model=item.gpu_model,
        ratio_name=f"{item.other}/{item.base}",
        runs_name=f"runs ({item.base}, {item.other})",
        rows=env_rows(item),
    )
