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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jinja2

from envaudit.report.glance import (
    choice_rows,
    interval_text,
    plain_text,
    reproduce_command,
    short_name,
    speedup_text,
)
from envaudit.report.plots import speedup_plot

TEMPLATE = "report.html.j2"


def render_html(
    summary: Mapping[str, Any],
    preferred: Mapping[str, Any],
    plots: Mapping[Path, bytes],
    out: Path,
    command: str,
    generated_at: str,
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
        generated_at=generated_at,
        command=command,
        lines=summary["lines"],
        models=_models(summary, preferred),
        definitions=[
            _definition(n, b, plots, out, lambda number: reproduce_command(summary, number))
            for n, b in summary["definitions"].items()
        ],
        devices=summary["devices"],
        environments=summary["environments"],
        harness_hashes=summary["harness_hashes"],
        rule=preferred["rule"],
    )


def _models(summary: Mapping[str, Any], preferred: Mapping[str, Any]) -> list[dict[str, Any]]:
    """At a glance, per GPU model: one row per definition and comparison."""
    models = sorted({m for b in summary["definitions"].values() for m in b["devices"]})
    return [
        {
            "name": model,
            "cards": summary["devices"].get(model, {}).get("uuids") or [],
            "rows": [
                row
                for name, block in summary["definitions"].items()
                if model in block["devices"]
                for row in choice_rows(
                    name, block["devices"][model], preferred["choices"][name][model]
                )
            ],
        }
        for model in models
    ]


def _definition(
    name: str,
    block: Mapping[str, Any],
    plots: Mapping[Path, bytes],
    out: Path,
    reproduce: Callable[[int], str],
) -> dict[str, Any]:
    devices = []
    for model, dblock in block["devices"].items():
        devices.append(
            {
                "name": model,
                "plot": _inline_svg(plots, out, speedup_plot(name, model, dblock["solutions"])),
                "solutions": [_solution(name, entry) for entry in dblock["solutions"]],
                "rows": [
                    _row(name, entry, row, reproduce)
                    for entry in dblock["solutions"]
                    for row in entry["per_workload"]
                ],
            }
        )
    return {"name": name, "baseline": block["baseline"], "devices": devices}


def _inline_svg(plots: Mapping[Path, bytes], out: Path, png: str | None) -> str | None:
    """The plot as a data: URI (an <img> keeps each figure's ids apart from the page's)."""
    if png is None:
        return None
    data = plots.get(out / Path(png).with_suffix(".svg"))
    if data is None:
        return None
    return "data:image/svg+xml;base64," + base64.b64encode(data).decode("ascii")


def _solution(definition: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    geo = entry["geomean_speedup"]
    counts = entry["workloads"]
    return {
        "name": short_name(entry["solution"], definition),
        "full_name": entry["solution"],
        "env": entry["env"],
        "baseline": entry["baseline"],
        "passed": counts["passed"],
        "total": counts["total"],
        "failed": ", ".join(f"{k} {v}" for k, v in counts["failed"].items()),
        "speedup": geo["primary"],
        "speedup_text": speedup_text(geo["primary"], geo.get("primary_ci95"))
        if geo["primary"] and not entry["baseline"]
        else ("1.00x" if entry["baseline"] else "–"),
        "compared": geo["workloads_compared"],
        "roofline": entry["roofline_fraction_median"],
        "provenance": _provenance(entry),
    }


def _row(
    definition: str,
    entry: Mapping[str, Any],
    row: Mapping[str, Any],
    reproduce: Callable[[int], str],
) -> dict[str, Any]:
    number = row.get("results_line")
    return {
        "workload": plain_text(str(row["label"] or row["uuid"][:8])),
        "uuid": row["uuid"],
        "solution": short_name(entry["solution"], definition),
        "status": row["status"],
        "flags": "; ".join(row.get("timing_flags") or []),
        "graph_ms": row["graph_median_ms"],
        "eager_ms": row["eager_median_ms"],
        "speedup": row["speedup_primary"] if not entry["baseline"] else None,
        "ci": interval_text(row.get("speedup_ci95")) if not entry["baseline"] else "",
        "modes": row.get("primary_timing") if not entry["baseline"] else None,
        "caveats": "; ".join(row.get("speedup_caveats") or []) if not entry["baseline"] else "",
        "provenance": _provenance(entry, row),
        "reproduce": reproduce(int(number)) if number else "",
    }


def _provenance(entry: Mapping[str, Any], row: Mapping[str, Any] | None = None) -> str:
    """What a hover shows: where the figure was measured and with what."""
    parts = [
        f"solution: {entry['solution']}",
        f"env: {entry['env']}",
        f"closure: {entry['closure_hash'] or 'none (host interpreter)'}",
        f"runtime: {entry['runtime']}",
        f"image: {entry['image_id'] or '–'}",
    ]
    if row is not None:
        parts += [f"GPU: {row['device']}", f"harness: {row.get('harness_hash') or '–'}"]
        if row.get("baseline_results_line") and not entry["baseline"]:
            where = row.get("baseline_device") or "–"
            parts.append(f"baseline: results line {row['baseline_results_line']} ({where})")
    else:
        parts.append("GPUs: " + ", ".join(entry["gpus"]))
    return "\n".join(parts)
