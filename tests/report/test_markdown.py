"""performance.md's definition sections read at a glance: one figure per cell (no <br>), the GPU
named once per model, the 95% interval in its own column with a caption that says what it stands
on, and the definition's speedup figure linked where render_plots draws one."""

from __future__ import annotations

import math
import re
from pathlib import Path

from envaudit.report.choice import preferred_solutions
from envaudit.report.intervals import CARD_TO_CARD_SD, RUN_TO_RUN_SD, Z95
from envaudit.report.markdown import render_markdown
from envaudit.report.plots import render_plots, short_gpu
from envaudit.schema.summary import ProbeCell, Summary
from tests.report.test_merge import GPU_B, MODEL_A, MODEL_B, line, summarize, write

LINK = re.compile(r"!\[[^\]]*\]\(([^)]+)\)")


def two_gpu_summary(tmp_path: Path) -> Summary:
    """GPU A: the baseline on w1 and w2, d-fast 2x on w1 and failing w2, d-fast again in another
    env. GPU B: the baseline alone (no speedup to draw, so no figure)."""
    lines = [
        line("d-torch", "w1", 2.0),
        line("d-torch", "w2", 4.0),
        line("d-fast", "w1", 1.0),
        line("d-fast", "w2", 1.0, status="RUNTIME_ERROR"),
        line("d-fast", "w1", 0.5, env="other-env", closure="c" * 64),
        line("d-torch", "w1", 3.0, gpu=GPU_B),
    ]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    return summary


def section(text: str, name: str) -> str:
    start = text.index(f"\n## {name}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the table whose header line starts with ``header``, the header's
    first, then the rows below its rule."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    rows = [lines[start]]
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        rows.append(ln)
    return [[cell.strip() for cell in ln.strip("|").split("|")] for ln in rows]


def rendered(summary: Summary) -> str:
    return render_markdown(summary, preferred_solutions(summary), [], "envaudit merge")


def test_no_cell_packs_several_figures(tmp_path: Path) -> None:
    text = rendered(two_gpu_summary(tmp_path))
    assert "<br>" not in text
    part = section(text, "d")
    for header in ("| solution |", "| workload |"):
        head, *rows = table_rows(part, header)
        assert rows and all(len(r) == len(head) for r in rows)


def test_the_gpu_label_is_written_once_per_model_in_a_definition(tmp_path: Path) -> None:
    part = section(rendered(two_gpu_summary(tmp_path)), "d")
    for model, card in ((MODEL_A, "GPU-aaaaaaaa"), (MODEL_B, "GPU-bbbbbbbb")):
        assert part.count(model) == 1, model
        assert f"{model} ({card}" in part


def test_solution_table_has_the_interval_in_its_own_column(tmp_path: Path) -> None:
    part = section(rendered(two_gpu_summary(tmp_path)), "d")
    header = "| solution | env | passed | geomean speedup | 95% CI | roofline |"
    assert header in part
    rows = {(r[0], r[1]): r for r in table_rows(part, header)[1:]}
    fast = rows[("`fast`", "torch-2.11-cu130")]
    assert fast[2] == "1/2 (RUNTIME_ERROR 1)"
    assert fast[3] == "2.00x"
    assert re.fullmatch(r"\[\d\.\d\d, \d\.\d\d\]", fast[4])
    assert rows[("`torch`", "torch-2.11-cu130")][4] == "–"  # the baseline has no interval


def test_workloads_are_long_form_one_row_per_workload_and_solution(tmp_path: Path) -> None:
    summary = two_gpu_summary(tmp_path)
    part = section(rendered(summary), "d")
    rows = table_rows(part, "| workload | solution | status |")[1:]
    on_a = summary.definitions["d"].devices[MODEL_A].solutions
    assert len(rows) == sum(len(e.per_workload) for e in on_a)
    assert [r[:3] for r in rows] == [  # by workload, then in the summary's solution order
        ["w1", "`fast` (other-env)", "PASSED"],
        ["″", "`fast` (torch-2.11-cu130)", "PASSED"],
        ["″", "`torch`", "PASSED"],
        ["w2", "`fast` (torch-2.11-cu130)", "**RUNTIME_ERROR**"],
        ["″", "`torch`", "PASSED"],
    ]
    fast_w1 = rows[1]
    # graph, eager, speedup with the figures it divides (the baseline's, then this line's)
    assert (fast_w1[3], fast_w1[4], fast_w1[5]) == ("0.9", "1", "2.00x (graph/graph)")


def test_the_caption_gives_the_run_to_run_floor_and_the_intervals_are_it(tmp_path: Path) -> None:
    part = section(rendered(two_gpu_summary(tmp_path)), "d")
    same = RUN_TO_RUN_SD["cuda_graph"]
    floor = Z95 * math.sqrt(2) * same  # half-width of log speedup, two lines of one card
    assert f"{100 * same:.1f}% for a graph or device-bound eager figure" in part
    assert f"about ±{100 * floor:.1f}% on one speedup" in part
    assert "±4.4%" in part  # the figure the constants give today
    assert f"{100 * CARD_TO_CARD_SD['cuda_graph']:.1f}% for graph figures from two cards" in part
    # these lines carry no quartiles: on one card, the interval on 2.00x is the floor alone
    low, high = 2.0 * math.exp(-floor), 2.0 * math.exp(floor)
    assert f"| 2.00x (graph/graph) | [{low:.2f}, {high:.2f}] |" in part


def test_the_plot_link_points_at_a_figure_render_plots_writes(tmp_path: Path) -> None:
    summary = two_gpu_summary(tmp_path)
    part = section(rendered(summary), "d")
    links = LINK.findall(part)
    assert links == [f"plots/d.{short_gpu(MODEL_A)}.png"]  # GPU B: baseline only, no figure
    assert part.index(links[0]) < part.index("Baseline:")  # right under the heading
    written = render_plots(summary, tmp_path / "out")
    assert tmp_path / "out" / links[0] in written


def test_strict_bound_and_scale_probe_go_to_the_notes_column(tmp_path: Path) -> None:
    summary = two_gpu_summary(tmp_path)
    baseline = summary.definitions["d"].devices[MODEL_B].solutions[0]
    [row] = baseline.per_workload
    row.strict_holds, row.strict_factor = False, 1.79
    row.scale_probe = [
        ProbeCell(factor=0.1, status="PASSED", max_absolute_error=2e-05),
        ProbeCell(factor=10, status="skipped", max_absolute_error=None),
    ]
    part = section(rendered(summary), "d")
    rows = table_rows(part[part.index(MODEL_B) :], "| workload |")
    assert rows[1][-1] == "strict bound missed (1.79x); scale x0.1 ok 2e-05, x10 skipped"
