"""plots/: speedup and roofline figures drawn from summary.json.

The plots are committed next to the report, so they must regenerate byte for byte: figures are
built on ``matplotlib.figure.Figure`` directly (no pyplot, so no global figure registry and no
interactive backend), under matplotlib's default rcParams (a user's matplotlibrc must not change
a committed file), with fixed sizes and DPI, a constant SVG hash salt, and no date or software
stamps in the files. matplotlib is pinned exactly in pyproject.toml for the same reason: glyph
outlines and PNG rasterisation change between releases.

Figures never mix GPUs: one speedup figure per definition and GPU, one roofline figure per GPU.
performance.md links each speedup figure by ``speedup_plot``, the rule ``render_plots`` names
them by, so a link never points at a figure that was not drawn.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Literal

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FormatStrFormatter, NullFormatter

from envaudit.schema.summary import DeviceInfo, SolutionBlock, Summary, WorkloadRow
from envaudit.schema.writes import replace_bytes

DPI = 100
SPEEDUP_SIZE = (11.0, 6.0)
ROOFLINE_WIDTH = 11.0
LOG_SCALE_RATIO = 10.0
"""Speedups spanning more than this factor (baseline 1.0 included) are drawn on a log axis."""

FAIL_COLOUR = "#c0392b"
NOT_RUN_COLOUR = "#bdbdbd"
NOT_RUN_TEXT_COLOUR = "#595959"
BASELINE_COLOUR = "#7f7f7f"
CI_COLOUR = "#262626"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")

SVG_HASH_SALT = "envaudit-plots"
PLOTS_DIR = "plots"
"""The figures' folder under the report's --out, which is where performance.md lives."""

_FAILED_LABEL = "failed or not compared (status on the bar)"
_NOT_RUN_LABEL = "not run (nothing to compare)"
_CI_LABEL = "95% interval per workload"
_LEGEND_LAST = (_CI_LABEL, _NOT_RUN_LABEL, _FAILED_LABEL)
_VENDORS = frozenset({"nvidia", "amd", "intel", "geforce", "tesla"})


@dataclass(frozen=True)
class _Slot:
    """One solution's bar at one workload: a speedup (with its 95% interval where the summary has
    one), or why there is none. ``kind`` keeps a workload nobody failed ("not run": the solution
    or the baseline never ran it) apart from a failure, so the figure draws them differently."""

    speedup: float | None
    mark: str | None
    kind: Literal["bar", "failed", "not run"] = "bar"
    ci: tuple[float, float] | None = None


def write_plots(summary: Summary, out: Path) -> list[Path]:
    """Write every figure under ``out/plots/`` (each atomically) and return the paths written,
    PNG then SVG."""
    figures = render_plots(summary, out)
    for path, data in figures.items():
        replace_bytes(path, data)
    return list(figures)


def render_plots(summary: Summary, out: Path) -> dict[Path, bytes]:
    """Every figure's bytes by its path under ``out/plots/``, PNG then SVG; nothing written."""
    target = out / PLOTS_DIR
    rendered: dict[Path, bytes] = {}
    devices = summary.devices
    with _reproducible_rc():
        for definition, block in sorted(summary.definitions.items()):
            for device, dblock in sorted(block.devices.items()):
                if not _has_speedup(dblock.solutions):
                    continue
                gpu = _gpu_name(devices, device)
                fig = _speedup_figure(definition, gpu, device, dblock.solutions)
                rendered.update(_render(fig, target / _speedup_stem(definition, device)))
        for device in _roofline_devices(summary):
            gpu = _gpu_name(devices, device)
            fig = _roofline_figure(gpu, device, _roofline_entries(summary, device))
            rendered.update(_render(fig, target / f"roofline.{short_gpu(device)}"))
    return rendered


def speedup_plot(definition: str, device: str, solutions: Sequence[SolutionBlock]) -> str | None:
    """The PNG ``render_plots`` draws for this definition on this GPU model, as a path relative
    to the report folder (``plots/<definition>.<short_gpu>.png``), or None where it draws none
    (no non-baseline speedup): performance.md links exactly the files this module writes."""
    if not _has_speedup(solutions):
        return None
    return f"{PLOTS_DIR}/{_speedup_stem(definition, device)}.png"


def _speedup_stem(definition: str, device: str) -> str:
    return f"{_safe(definition)}.{short_gpu(device)}"


def short_gpu(model: str) -> str:
    """A filesystem-safe tag of a GPU model key (summary.gpu_model_of): model, memory, driver,
    e.g. ``h200-140gib-580.159.04``, so two models (or drivers) never overwrite each other's
    figures and two cards of one model share theirs."""
    text = model.lower().replace(" gib", "gib").replace("driver ", "")
    words = [w for w in re.split(r"[^a-z0-9.]+", text) if w and w not in _VENDORS]
    return "-".join(words).strip(".") or "gpu"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "unnamed"


def _where(gpu: str, device: str) -> str:
    """The model key names the GPU already; anything else gets the name beside it."""
    return device if gpu in device else f"{gpu} ({device})"


def _gpu_name(devices: Mapping[str, DeviceInfo], device: str) -> str:
    found = devices.get(device)
    return found.name if found is not None and found.name else device


@contextmanager
def _reproducible_rc() -> Iterator[None]:
    """matplotlib's defaults plus our fixed settings, whatever the caller's matplotlibrc says."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(
            {"svg.hashsalt": SVG_HASH_SALT, "svg.fonttype": "path", "font.size": 9.0}
        )
        yield


def _render(fig: Figure, stem: Path) -> dict[Path, bytes]:
    """PNG and SVG bytes without timestamps or software stamps; then drop the figure's artists."""
    png, svg = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, metadata={"Software": None})
    fig.savefig(svg, format="svg", dpi=DPI, metadata={"Date": None})
    fig.clear()
    return {
        stem.parent / f"{stem.name}.png": png.getvalue(),
        stem.parent / f"{stem.name}.svg": svg.getvalue(),
    }


# --- speedup figure -------------------------------------------------------------------------


def _has_speedup(solutions: Sequence[SolutionBlock]) -> bool:
    return any(
        not entry.baseline and any(r.speedup_primary for r in entry.per_workload)
        for entry in solutions
    )


def _workload_key(row: WorkloadRow) -> tuple[str, str]:
    return (row.label or "", row.uuid)


def _workloads(solutions: Sequence[SolutionBlock]) -> list[WorkloadRow]:
    """Every workload any solution on this GPU ran, in the summary's (label, uuid) order."""
    rows: dict[str, WorkloadRow] = {}
    for entry in solutions:
        for row in entry.per_workload:
            rows.setdefault(row.uuid, row)
    return sorted(rows.values(), key=_workload_key)


def _slots(
    entry: SolutionBlock, workloads: Sequence[WorkloadRow], base: Mapping[str, str]
) -> list[_Slot]:
    """Bars for one solution; a missing bar always says why (its status, or the baseline's)."""
    mine = {r.uuid: r for r in entry.per_workload}
    return [_slot(mine.get(w.uuid), base.get(w.uuid)) for w in workloads]


def _slot(row: WorkloadRow | None, base_status: str | None) -> _Slot:
    """A workload the solution (or the baseline) never ran is "not run", not a failure."""
    if row is None:
        return _Slot(None, "not run", "not run")
    if not row.passed:
        return _Slot(None, row.status, "failed")
    if row.speedup_primary:
        bounds = row.speedup_ci95
        ci = (float(bounds[0]), float(bounds[1])) if bounds else None
        return _Slot(float(row.speedup_primary), None, "bar", ci)
    if base_status is None:
        return _Slot(None, "baseline not run", "not run")
    return _Slot(None, f"baseline {base_status}", "failed")


def _speedup_figure(
    definition: str, gpu: str, device: str, solutions: Sequence[SolutionBlock]
) -> Figure:
    workloads = _workloads(solutions)
    baseline = next((e for e in solutions if e.baseline), None)
    base_status = {r.uuid: r.status for r in (baseline.per_workload if baseline else [])}
    others = [e for e in solutions if not e.baseline]
    slots = [_slots(e, workloads, base_status) for e in others]
    fig = Figure(figsize=SPEEDUP_SIZE, dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    log = _use_log(slots)
    _draw_baseline(ax, baseline)
    gaps = _draw_bars(ax, others, slots, log)
    _style_speedup_axes(ax, workloads, log, _lowest(slots))
    _failure_reasons(ax, gaps, log)
    ax.set_title(f"{definition}\n{_where(gpu, device)}", fontsize=10)
    _speedup_legend(fig, ax)
    return fig


def _speedup_legend(fig: Figure, ax: Axes) -> None:
    """Below the axes (long solution names would cover bars); the interval, not-run and failure
    keys last, in that order."""
    pairs = sorted(
        zip(*ax.get_legend_handles_labels(), strict=True),
        key=lambda p: _LEGEND_LAST.index(p[1]) + 1 if p[1] in _LEGEND_LAST else 0,
    )
    handles, labels = [p[0] for p in pairs], [p[1] for p in pairs]
    ncols = 1 if len(labels) <= 4 else 2
    fig.legend(handles, labels, loc="outside lower center", ncols=ncols, fontsize=8, frameon=False)


def _speedups(slots: Sequence[Sequence[_Slot]]) -> list[float]:
    return [s.speedup for row in slots for s in row if s.speedup] + [1.0]


def _use_log(slots: Sequence[Sequence[_Slot]]) -> bool:
    values = _speedups(slots)
    return max(values) / min(values) > LOG_SCALE_RATIO


def _lowest(slots: Sequence[Sequence[_Slot]]) -> float:
    """The lowest bar, or the lowest end of an interval, so a log axis shows every whisker."""
    lows = [s.ci[0] for row in slots for s in row if s.ci and s.ci[0] > 0]
    return min(_speedups(slots) + lows)


def _draw_baseline(ax: Axes, baseline: SolutionBlock | None) -> None:
    label = f"baseline {baseline.solution} ({baseline.env}) = 1.0" if baseline else "baseline = 1.0"
    ax.axhline(1.0, color=BASELINE_COLOUR, linestyle="--", linewidth=1.2, label=label, zorder=1)


def _draw_bars(
    ax: Axes, others: Sequence[SolutionBlock], slots: Sequence[Sequence[_Slot]], log: bool
) -> list[tuple[float, _Slot]]:
    """Grouped bars, one colour per solution. On a log axis bars grow from the baseline's 1.0 (a
    log axis has no zero), so a slowdown points down; on a linear axis they start at 0. Returns
    the gaps (no bar) with their x, for ``_failure_reasons`` to label once the axes are final."""
    width = 0.8 / max(len(others), 1)
    gaps: list[tuple[float, _Slot]] = []
    for i, (entry, row) in enumerate(zip(others, slots, strict=True)):
        xs = [x - 0.4 + width * (i + 0.5) for x in range(len(row))]
        base = 1.0 if log else 0.0
        heights = [(s.speedup - base) if s.speedup else 0.0 for s in row]
        label = f"{entry.solution} ({entry.env}) geomean {_fmt(entry)}"
        colour = PALETTE[i % len(PALETTE)]
        ax.bar(xs, heights, width=width * 0.9, bottom=base, color=colour, label=label, zorder=2)
        for j, (x, slot) in enumerate(zip(xs, row, strict=True)):
            if slot.speedup is not None:
                _interval_bar(ax, x, slot, f"ci-{i}-{j}")
                _value_label(ax, x, slot, below=log and slot.speedup < 1.0)
            elif slot.kind == "not run":
                _not_run_mark(ax, x, width, f"notrun-{i}-{j}")
                gaps.append((x, slot))
            else:
                _failure_mark(ax, x, width, f"failed-{i}-{j}")
                gaps.append((x, slot))
    return gaps


def _interval_bar(ax: Axes, x: float, slot: _Slot, gid: str) -> None:
    """The workload's 95% interval as a whisker on its bar, so a reader sees which differences
    are outside the run-to-run noise. Bars without an interval in the summary get none."""
    if slot.ci is None or slot.speedup is None:
        return
    low, high = slot.ci
    drawn = ax.errorbar(
        [x],
        [slot.speedup],
        yerr=[[max(slot.speedup - low, 0.0)], [max(high - slot.speedup, 0.0)]],
        fmt="none",
        ecolor=CI_COLOUR,
        elinewidth=0.9,
        capsize=2.5,
        capthick=0.9,
        zorder=3,
    )
    for collection in drawn.lines[2]:
        collection.set_gid(gid)
    if not any(text == _CI_LABEL for text in ax.get_legend_handles_labels()[1]):
        drawn.set_label(_CI_LABEL)


def _fmt(entry: SolutionBlock) -> str:
    value = entry.geomean_speedup.primary
    return f"{value:.2f}×" if value else "n/a"


def _value_label(ax: Axes, x: float, slot: _Slot, below: bool) -> None:
    """The speedup, written past the end of its whisker (or bar) so the two never overlap."""
    value = float(slot.speedup or 0.0)
    end = (slot.ci[0] if below else slot.ci[1]) if slot.ci else value
    ax.annotate(
        f"{value:.2f}×",
        (x, end),
        xytext=(0, -2 if below else 2),
        textcoords="offset points",
        ha="center",
        va="top" if below else "bottom",
        fontsize=7,
    )


def _failure_mark(ax: Axes, x: float, width: float, gid: str) -> None:
    """A hatched full-height gap and a ✕ on the 1.0 line, so a failed workload reads as a failure
    and never as a missing or zero bar. The gid lets tests find it in the SVG."""
    half = width * 0.45
    span = ax.axvspan(
        x - half, x + half, fill=False, hatch="//", edgecolor=FAIL_COLOUR, alpha=0.5, zorder=1
    )
    span.set_gid(gid)
    if not any(patch.get_label() == _FAILED_LABEL for patch in ax.patches):
        span.set_label(_FAILED_LABEL)
    ax.plot([x], [1.0], marker="x", color=FAIL_COLOUR, markersize=9, mew=2, zorder=3)


def _not_run_mark(ax: Axes, x: float, width: float, gid: str) -> None:
    """A plain grey band: nothing was measured, so nothing failed; no hatch and no ✕, which the
    failure mark keeps for itself. The gid lets tests find it in the SVG."""
    half = width * 0.45
    span = ax.axvspan(
        x - half, x + half, facecolor=NOT_RUN_COLOUR, edgecolor="none", alpha=0.35, zorder=1
    )
    span.set_gid(gid)
    if not any(patch.get_label() == _NOT_RUN_LABEL for patch in ax.patches):
        span.set_label(_NOT_RUN_LABEL)


def _failure_reasons(ax: Axes, gaps: Sequence[tuple[float, _Slot]], log: bool) -> None:
    """Write each gap's status inside the axes, in the half away from the 1.0 line, so it never
    covers the ✕ nor runs into the title: red for a failure, grey for "not run". Needs the final
    y limits, hence after styling."""
    low, high = ax.get_ylim()
    if log:
        low, high, one = math.log(low), math.log(high), 0.0
    else:
        one = 1.0
    at_top = (one - low) / (high - low) < 0.5
    for x, slot in gaps:
        ax.text(
            x,
            0.97 if at_top else 0.03,
            str(slot.mark),
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top" if at_top else "bottom",
            rotation=90,
            fontsize=7,
            color=NOT_RUN_TEXT_COLOUR if slot.kind == "not run" else FAIL_COLOUR,
            bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"},
            zorder=4,
        )


def _style_speedup_axes(
    ax: Axes, workloads: Sequence[WorkloadRow], log: bool, lowest: float
) -> None:
    names = [w.name for w in workloads]
    slanted = len(names) * max((len(n) for n in names), default=0) > 110
    ax.set_xticks(
        range(len(names)),
        names,
        rotation=30 if slanted else 0,
        ha="right" if slanted else "center",
        fontsize=8,
    )
    ax.set_xlim(-0.6, len(names) - 0.4)
    ax.set_xlabel("workload")
    ax.set_ylabel("speedup over baseline (×, higher is faster)")
    if log:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.margins(y=0.15)
    # Linear axes start at 0; log axes a little below the lowest bar (or the 1.0 line).
    ax.set_ylim(bottom=lowest / 1.6 if log else 0.0)
    ax.grid(axis="y", which="major", linewidth=0.5, alpha=0.5, zorder=0)


# --- roofline figure ------------------------------------------------------------------------


@dataclass(frozen=True)
class _RooflineBar:
    definition: str
    label: str
    fraction: float
    baseline: bool


def _roofline_devices(summary: Summary) -> list[str]:
    found = {
        device
        for block in summary.definitions.values()
        for device, dblock in block.devices.items()
        if any(e.roofline_fraction_median for e in dblock.solutions)
    }
    return sorted(found)


def _roofline_entries(summary: Summary, device: str) -> list[_RooflineBar]:
    """Definitions alphabetically; within one, solutions from nearest to farthest from peak."""
    bars: list[_RooflineBar] = []
    for definition, block in sorted(summary.definitions.items()):
        dblock = block.devices.get(device)
        entries = dblock.solutions if dblock is not None else []
        group = [
            _RooflineBar(definition, _roofline_label(definition, e), float(fr), e.baseline)
            for e in entries
            if (fr := e.roofline_fraction_median)
        ]
        bars += sorted(group, key=lambda b: (-b.fraction, b.label))
    return bars


def _roofline_label(definition: str, entry: SolutionBlock) -> str:
    name = entry.solution
    if not name.startswith(definition):
        name = f"{definition}: {name}"
    suffix = ", baseline" if entry.baseline else ""
    return f"{name} ({entry.env}{suffix})"


def _roofline_figure(gpu: str, device: str, bars: Sequence[_RooflineBar]) -> Figure:
    height = 1.6 + 0.26 * len(bars)
    fig = Figure(figsize=(ROOFLINE_WIDTH, height), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ys = list(range(len(bars)))
    colours = [BASELINE_COLOUR if b.baseline else PALETTE[0] for b in bars]
    ax.barh(ys, [b.fraction for b in bars], color=colours, height=0.7, zorder=2)
    for y, bar in zip(ys, bars, strict=True):
        ax.annotate(
            f"{bar.fraction:.3f}",
            (bar.fraction, y),
            xytext=(3, 0),
            textcoords="offset points",
            va="center",
            fontsize=7,
        )
    _shade_definitions(ax, bars)
    ax.set_yticks(ys, [b.label for b in bars], fontsize=7)
    ax.set_ylim(len(bars) - 0.5, -0.5)
    ax.set_xlim(0.0, max([1.0] + [b.fraction * 1.08 for b in bars]))
    ax.set_xlabel("median roofline fraction over passed workloads (achieved / attainable)")
    ax.grid(axis="x", linewidth=0.5, alpha=0.5, zorder=0)
    ax.set_title(f"Roofline fraction per solution\n{_where(gpu, device)}", fontsize=10)
    handles = [
        Patch(color=PALETTE[0], label="solution"),
        Patch(color=BASELINE_COLOUR, label="baseline"),
    ]
    ax.legend(handles=handles, loc="best", fontsize=8)
    return fig


def _shade_definitions(ax: Axes, bars: Sequence[_RooflineBar]) -> None:
    """Shade every other definition's band so each definition's solutions read as a group."""
    start = 0
    for index, (_, group) in enumerate(groupby(bars, key=lambda b: b.definition)):
        size = len(list(group))
        if index % 2 == 1:
            ax.axhspan(start - 0.5, start + size - 0.5, color="#eeeeee", zorder=0, linewidth=0)
        start += size
