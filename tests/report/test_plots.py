"""plots/: one speedup figure per definition and GPU with a measured non-baseline solution, one
roofline figure per GPU, failures drawn as marked gaps and workloads not run as neutral ones,
95% intervals as whiskers, and byte-identical output on a rerun (the figures are committed and
CI regenerates them)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib
import pytest

from envaudit.report.merge import merge_files
from envaudit.report.plots import FAIL_COLOUR, NOT_RUN_COLOUR, short_gpu, write_plots
from envaudit.report.summary import SolutionInfo, build_summary
from envaudit.schema.summary import Summary

REPO = Path(__file__).resolve().parents[2]
SHIPPED_RESULTS = REPO / "docs" / "results" / "h100"
GPU = "NVIDIA H100 80GB HBM3, 80 GiB, driver 580.159.04"  # a GPU model key
TAG = "h100-80gb-hbm3-80gib-580.159.04"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def row(label: str | None, uuid: str, status: str = "PASSED", **extra: Any) -> dict[str, Any]:
    speedup = extra.pop("speedup", None)
    return {
        "label": label,
        "uuid": uuid,
        "device": "GPU-aaaaaaaa",
        "status": status,
        "eager_median_ms": 1.0,
        "graph_median_ms": None,
        "speedup_eager": speedup,
        "speedup_graph": None,
        "speedup_primary": speedup,
        "primary_timing": "eager",
        "roofline_fraction": extra.pop("roofline", None),
        "speedup_ci95": extra.pop("ci", None),
    }


def entry(name: str, baseline: bool, rows: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    fractions = sorted(r["roofline_fraction"] for r in rows if r["roofline_fraction"])
    return {
        "solution": name,
        "baseline": baseline,
        "env": extra.get("env", "torch-2.11-cu130"),
        "geomean_speedup": {"primary": extra.get("geomean")},
        "workloads": {"total": len(rows), "passed": sum(r["status"] == "PASSED" for r in rows)},
        "roofline_fraction_median": fractions[len(fractions) // 2] if fractions else None,
        "per_workload": rows,
    }


def hand_made_summary() -> Summary:
    return Summary.model_validate(hand_made())


def hand_made() -> dict[str, Any]:
    """toy_op: a baseline and a candidate that fails one workload; solo_op: a baseline only (as
    summary.json holds it)."""
    base = entry(
        "toy_op-torch",
        True,
        [
            row("small", "aaaaaaaa-1", speedup=1.0, roofline=0.2),
            row("large", "bbbbbbbb-2", speedup=1.0, roofline=0.3),
            row(None, "cccccccc-3", speedup=1.0, roofline=0.25),
        ],
    )
    fast = entry(
        "toy_op-triton",
        False,
        [
            row("small", "aaaaaaaa-1", speedup=3.5, roofline=0.7),
            row("large", "bbbbbbbb-2", status="RUNTIME_ERROR"),
            row(None, "cccccccc-3", speedup=2.0, roofline=0.6),
        ],
        geomean=2.65,
    )
    solo = entry("solo_op-torch", True, [row("only", "dddddddd-4", speedup=1.0, roofline=0.5)])
    return {
        "definitions": {
            "toy_op": {"baseline": "toy_op-torch", "devices": {GPU: {"solutions": [base, fast]}}},
            "solo_op": {"baseline": "solo_op-torch", "devices": {GPU: {"solutions": [solo]}}},
        },
        "devices": {GPU: {"name": "NVIDIA H100 80GB HBM3"}},
        "lines": 7,
    }


def shipped_summary() -> Summary:
    """The summary of the shipped H100 lines, built the way the report builds it."""
    merged = merge_files(sorted(SHIPPED_RESULTS.glob("*.jsonl")))
    solutions = {}
    for path in (REPO / "solutions").glob("*/solution.json"):
        d = json.loads(path.read_text())
        solutions[d["name"]] = SolutionInfo(
            d["name"], d["definition"], d["author"], d["env"], d.get("baseline", False)
        )
    definitions = {}
    for path in (REPO / "workloads" / "definitions").rglob("*.json"):
        d = json.loads(path.read_text())
        definitions[d["name"]] = d
    return build_summary(merged, solutions, definitions)


def expected_speedup_stems(summary: Summary) -> set[str]:
    stems = set()
    for definition, block in summary.definitions.items():
        for device, dblock in block.devices.items():
            if any(
                not e.baseline and any(r.speedup_primary for r in e.per_workload)
                for e in dblock.solutions
            ):
                stems.add(f"{definition}.{short_gpu(device)}")
    return stems


def test_short_gpu_tags_the_model_memory_and_driver() -> None:
    assert short_gpu(GPU) == TAG
    assert short_gpu("NVIDIA GeForce RTX 4090, 24 GiB, driver 570.1") == "rtx-4090-24gib-570.1"
    assert short_gpu("cpu") == "cpu"


def test_hand_made_files_formats_and_baseline_only(tmp_path: Path) -> None:
    written = write_plots(hand_made_summary(), tmp_path)
    names = sorted(p.name for p in written)
    assert names == [
        f"roofline.{TAG}.png",
        f"roofline.{TAG}.svg",
        f"toy_op.{TAG}.png",
        f"toy_op.{TAG}.svg",
    ]
    assert not any(name.startswith("solo_op.") for name in names)  # baseline only: no speedup
    for path in written:
        assert path.parent == tmp_path / "plots"
        data = path.read_bytes()
        assert len(data) > 10_000
        if path.suffix == ".png":
            assert data.startswith(PNG_MAGIC)
        else:
            assert ET.fromstring(data).tag.endswith("svg")


def test_failed_workload_is_a_marked_gap(tmp_path: Path) -> None:
    write_plots(hand_made_summary(), tmp_path)
    svg = (tmp_path / "plots" / f"toy_op.{TAG}.svg").read_text()
    # solution 0 (toy_op-triton), workload 1 in (label, uuid) order: "large"
    assert 'id="failed-0-1"' in svg
    assert svg.count('id="failed-') == 1
    assert "RUNTIME_ERROR" in svg
    assert "failed or not compared" in svg


def with_a_partial_solution() -> Summary:
    """hand_made_summary plus toy_op-cuda, which ran "small" only (with an interval): the other
    two workloads are not run, not failed; and an interval on toy_op-triton's "small"."""
    summary = hand_made()
    solutions = summary["definitions"]["toy_op"]["devices"][GPU]["solutions"]
    solutions[1]["per_workload"][0]["speedup_ci95"] = [3.3, 3.7]
    partial = row("small", "aaaaaaaa-1", speedup=2.0, ci=[1.9, 2.1])
    solutions.append(entry("toy_op-cuda", False, [partial], geomean=2.0))
    return Summary.model_validate(summary)


def drawn_style(svg: str, gid: str) -> str:
    """The style of the shape drawn under this gid."""
    group = ET.fromstring(svg).find(f".//*[@id='{gid}']")
    assert group is not None, gid
    path = group.find("{http://www.w3.org/2000/svg}path")
    assert path is not None, gid
    return path.get("style") or ""


def test_speedup_bars_carry_their_95_percent_interval(tmp_path: Path) -> None:
    write_plots(with_a_partial_solution(), tmp_path)
    svg = (tmp_path / "plots" / f"toy_op.{TAG}.svg").read_text()
    # workloads in (label, uuid) order: cccccccc-3 (no label), large, small
    assert 'id="ci-0-2"' in svg and 'id="ci-1-2"' in svg  # "small" has an interval, both bars
    assert 'id="ci-0-0"' not in svg  # cccccccc-3's row has none, so no whisker is made up
    assert svg.count('id="ci-') == 2
    assert "95% interval per workload" in svg


def test_not_run_is_drawn_neutral_and_apart_from_a_failure(tmp_path: Path) -> None:
    write_plots(with_a_partial_solution(), tmp_path)
    svg = (tmp_path / "plots" / f"toy_op.{TAG}.svg").read_text()
    assert svg.count('id="failed-') == 1 and 'id="failed-0-1"' in svg  # triton's RUNTIME_ERROR
    assert svg.count('id="notrun-') == 2  # cuda never ran cccccccc-3 nor large
    failed = drawn_style(svg, "failed-0-1")
    for gid in ("notrun-1-0", "notrun-1-1"):
        neutral = drawn_style(svg, gid)
        assert f"fill: {NOT_RUN_COLOUR}" in neutral
        assert FAIL_COLOUR not in neutral and "url(#h" not in neutral  # no red, no hatch
    assert FAIL_COLOUR in failed and "url(#h" in failed  # the failure keeps its red hatch
    assert "not run (nothing to compare)" in svg and "failed or not compared" in svg


def test_roofline_lists_every_solution_with_a_fraction(tmp_path: Path) -> None:
    write_plots(hand_made_summary(), tmp_path)
    svg = (tmp_path / "plots" / f"roofline.{TAG}.svg").read_text()
    for name in ("toy_op-torch", "toy_op-triton", "solo_op-torch"):
        assert name in svg
    for value in ("0.250", "0.700", "0.500"):  # upper median of each solution's fractions
        assert value in svg


def test_rerun_is_byte_identical_and_leaves_rcparams_alone(tmp_path: Path) -> None:
    before = dict(matplotlib.rcParams)
    first = write_plots(with_a_partial_solution(), tmp_path / "a")
    second = write_plots(with_a_partial_solution(), tmp_path / "b")
    assert [p.name for p in first] == [p.name for p in second]
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
    assert dict(matplotlib.rcParams) == before
    svg = first[1].read_text() if first[1].suffix == ".svg" else first[0].read_text()
    assert "<dc:date>" not in svg


@pytest.mark.skipif(not SHIPPED_RESULTS.is_dir(), reason="shipped H100 results not present")
def test_shipped_results_give_one_figure_per_definition_and_gpu(tmp_path: Path) -> None:
    summary = shipped_summary()
    written = write_plots(summary, tmp_path)
    stems = {p.name.rsplit(".", 1)[0] for p in written}
    speedup_stems = {s for s in stems if not s.startswith("roofline.")}
    assert speedup_stems == expected_speedup_stems(summary)
    assert speedup_stems  # the shipped lines do carry non-baseline speedups
    assert not any(s.startswith("dense_attention_h16_d72.") for s in stems)  # baseline only
    assert {s for s in stems if s.startswith("roofline.")} == {
        f"roofline.{short_gpu(model)}" for model in summary.devices
    }
    assert len(written) == 2 * len(stems)
    for path in written:
        if path.suffix == ".png":
            assert path.read_bytes().startswith(PNG_MAGIC)
