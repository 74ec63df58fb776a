"""One typed summary, every output rendered from it: performance.md, report.html, summary.json,
preferred-solutions.json and `compare --json` give the same numbers for the same question, and
FlashMLA 13.1 against 13.3 gets one verdict in the environment comparison, at a glance and in
`compare --across-envs`."""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.report.choice import preferred_solutions
from envaudit.report.glance import ratio_text
from envaudit.report.html import render_html
from envaudit.report.markdown import render_markdown
from envaudit.schema.summary import Preferred, Summary
from tests.conftest import REPO
from tests.report.test_merge import MODEL_A, line, summarize, write

DOCS = REPO / "docs" / "report"
FLASHMLA = REPO / "docs" / "results" / "h200" / "flashmla"


def outputs(summary: Summary, preferred: Preferred) -> tuple[str, str, dict[str, Any], Any]:
    """performance.md, report.html, summary.json and preferred-solutions.json as written."""
    markdown = render_markdown(summary, preferred, [], "envaudit merge")
    page = html.unescape(render_html(summary, preferred, {}, Path("out"), "envaudit merge"))
    return markdown, page, summary.model_dump(mode="json"), preferred.model_dump(mode="json")


def test_every_output_shows_the_summarys_numbers(tmp_path: Path) -> None:
    """Each speedup and median of the summary in performance.md and report.html, each choice
    of preferred-solutions.json in both glance tables, the JSON files the typed objects."""
    lines = [line("d-torch", w, ms) for w, ms in (("w1", 10.0), ("w2", 8.0))]
    lines += [line("d-fast", w, ms, env="fast-env") for w, ms in (("w1", 2.0), ("w2", 3.0))]
    lines += [line("d-fast", "w1", 2.1, env="slow-env"), line("d-fast", "w2", 2.9, env="slow-env")]
    _, summary = summarize([write(tmp_path / "r.jsonl", lines)])
    preferred = preferred_solutions(summary)
    markdown, page, summary_json, preferred_json = outputs(summary, preferred)
    assert Summary.model_validate(summary_json) == summary
    assert Preferred.model_validate(preferred_json) == preferred
    checked = 0
    for entry in summary.definitions["d"].devices[MODEL_A].solutions:
        for row in entry.per_workload:
            if row.speedup_primary is None or entry.baseline:
                continue
            shown = f"{row.speedup_primary:.2f}x ({row.primary_timing})"
            assert shown in markdown
            assert f'data-value="{row.speedup_primary}"' in page
            assert f"{row.speedup_primary:.2f}x" in page
            checked += 1
        if entry.geomean_speedup.primary and not entry.baseline:
            assert f"{entry.geomean_speedup.primary:.2f}x" in markdown
            assert f'data-value="{entry.geomean_speedup.primary}"' in page
    assert checked == 4
    choice = preferred_json["choices"]["d"][MODEL_A]
    best = choice["choice"]["geomean_speedup"]
    for text in (markdown, page):
        assert f"{best:.2f}x" in text
    assert f'data-value="{best}"' in page


def test_one_env_comparison_one_verdict_in_every_output(tmp_path: Path) -> None:
    """A solution in two envs: the environment comparison, the choice against its runner-up
    (the same solution in the other env) and `compare --across-envs` of the two envs' lines
    give the same ratio, interval and verdict."""
    fast = [line("d-fast", w, ms, env="fast-env") for w, ms in (("w1", 2.0), ("w2", 3.0))]
    slow = [line("d-fast", w, ms, env="slow-env") for w, ms in (("w1", 2.1), ("w2", 2.9))]
    base = [line("d-torch", w, 10.0) for w in ("w1", "w2")]
    _, summary = summarize([write(tmp_path / "r.jsonl", base + fast + slow)])
    preferred = preferred_solutions(summary)
    markdown, page, _, _ = outputs(summary, preferred)
    [env] = summary.env_comparisons
    comparison = preferred.choices["d"][MODEL_A].comparisons[0]
    ratio = comparison.ratio_to_runner_up
    assert ratio is not None and comparison.choice is not None
    assert (env.base, env.other) == ("slow-env", "fast-env")
    # the runner-up's time over the choice's is OTHER/BASE where the choice is the base env,
    # its inverse where the choice is the other
    inverse = comparison.choice.env == env.other
    assert math.isclose(ratio.value, 1 / env.geomean.value if inverse else env.geomean.value)
    assert ratio.within_noise == env.geomean.within_noise == comparison.indistinguishable
    assert f"{env.geomean.value:.4f}" in markdown and f"{env.geomean.value:.4f}" in page
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(write(tmp_path / "slow.jsonl", base + slow)),
            str(write(tmp_path / "fast.jsonl", base + fast)),
            "--across-envs",
            "--json",
        ],
    )
    answer = json.loads(result.stdout)
    [geo] = [g for g in answer["geomeans"] if g["solution"] == "d-fast"]
    assert geo["ratio"] == env.geomean.value and geo["ci95"] == env.geomean.ci95
    assert geo["within_noise"] == env.geomean.within_noise
    pairs = {p["workload"]: p for p in answer["pairs"] if p["solution"] == "d-fast"}
    for row in env.workloads:
        assert math.isclose(pairs[row.workload]["ratio"], row.ratio.value, rel_tol=1e-12)
        assert row.ratio.ci95 is not None
        for got, want in zip(pairs[row.workload]["ci95"], row.ratio.ci95, strict=True):
            assert math.isclose(got, want, rel_tol=1e-12)


def test_the_committed_flashmla_verdict_is_one_everywhere() -> None:
    """FlashMLA built with CUDA 13.1 and 13.3: the committed report's environment comparison,
    its choice against the runner-up at a glance (the two builds), and `compare --across-envs`
    of the two result files: the same geometric means, intervals and verdict (within noise)."""
    summary = Summary.model_validate_json((DOCS / "summary.json").read_text())
    preferred = Preferred.model_validate_json((DOCS / "preferred-solutions.json").read_text())
    markdown = (DOCS / "performance.md").read_text()
    page = html.unescape((DOCS / "report.html").read_text())
    result = CliRunner().invoke(
        app,
        [
            "compare",
            str(FLASHMLA / "flashmla-13.1.jsonl"),
            str(FLASHMLA / "flashmla-13.3.jsonl"),
            "--across-envs",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    geomeans = {g["solution"]: g for g in json.loads(result.stdout)["geomeans"]}
    flashmla = [c for c in summary.env_comparisons if c.solution.endswith("-flashmla")]
    assert len(flashmla) == 3
    for env in flashmla:
        assert (env.base, env.other) == ("flashmla-13.1", "flashmla-13.3")
        definition = env.solution.removesuffix("-flashmla")
        [choice] = preferred.choices[definition].values()
        comparison = choice.comparisons[0]
        assert comparison.choice is not None and comparison.runner_up is not None
        assert {comparison.choice.env, comparison.runner_up.env} == {env.base, env.other}
        ratio = comparison.ratio_to_runner_up
        assert ratio is not None
        inverse = comparison.choice.env == env.other
        assert math.isclose(ratio.value, 1 / env.geomean.value if inverse else env.geomean.value)
        geo = geomeans[env.solution]
        assert math.isclose(geo["ratio"], env.geomean.value, rel_tol=1e-12)
        assert env.geomean.ci95 is not None
        for got, want in zip(geo["ci95"], env.geomean.ci95, strict=True):
            assert math.isclose(got, want, rel_tol=1e-12)
        verdicts = {env.geomean.within_noise, ratio.within_noise, geo["within_noise"]}
        assert verdicts == {choice.indistinguishable} == {True}
        assert geo["verdict"] == "within noise"
        # the printed figure, in both pages: the env comparison's row and at a glance
        shown = ratio_text(env.geomean if not inverse else ratio)
        for text in (markdown, page):
            assert f"{env.geomean.value:.4f}" in text
            assert f"time vs the choice: {shown}, indistinguishable" in text


def test_the_committed_report_html_carries_what_performance_md_has() -> None:
    """The environment comparisons, the stand-in notes, the interval method and the native
    calls table are in both, and the header says what the speedups pair."""
    markdown = (DOCS / "performance.md").read_text()
    page = html.unescape((DOCS / "report.html").read_text())
    for heading in ("Environment comparisons", "Native calls these definitions stand for"):
        assert f"## {heading}" in markdown and f">{heading}</h2>" in page
    notes = re.findall(r"^- (\S+: source .* stands in for .*)$", markdown, re.MULTILINE)
    assert notes and all(note in page for note in notes)
    assert "95% CI: from each line's quartiles plus a run-to-run floor" in page
    assert "by the report's one comparison rule" in page
    assert "same card where the baseline's newest line ran there" in page
    assert "differ only in" in page or "differ in" in page
