"""`make report` (`envaudit merge $(REPORT_LINES) --out docs/report`, the result files the Makefile
names) reproduces the committed report byte for byte, apart from the generation time (and the
--out folder named in the command line)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REPO

DOCS = REPO / "docs" / "report"
VOLATILE = re.compile(rb'^.*("generated_at"|Generated \d{4}-).*$', re.MULTILINE)


def _masked(path: Path, out: Path | None = None) -> bytes:
    """The file less its generation time; a report written to `out` names its results file
    there in its reproduce commands, which the committed one names docs/report/results.jsonl."""
    text = path.read_bytes()
    if out is not None:
        text = text.replace(f"{out}/results.jsonl".encode(), b"docs/report/results.jsonl")
    return VOLATILE.sub(b"<generated>", text)


def report_lines() -> list[str]:
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")  # make's line continuations
    found = re.search(r"^REPORT_LINES := (.+)$", text, re.MULTILINE)
    assert found, "the Makefile names no REPORT_LINES"
    return found.group(1).split()


def test_committed_report_regenerates_byte_for_byte(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(REPO)  # the command names its inputs by their paths in the repo
    inputs = report_lines()
    out = tmp_path / "docs"
    result = CliRunner().invoke(app, ["merge", *inputs, "--out", str(out)])
    assert result.exit_code == 0, result.output
    produced = sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    assert len(produced) >= 10
    different = [str(rel) for rel in produced if _masked(out / rel, out) != _masked(DOCS / rel)]
    assert not different, "regenerate with `make report` and commit: " + ", ".join(different)
    committed_plots = {p.relative_to(DOCS) for p in (DOCS / "plots").iterdir()}
    assert committed_plots == {p for p in produced if p.parts[0] == "plots"}


def test_the_readme_counts_are_the_reports() -> None:
    """README's sentence of counts is checked against the committed report, so it cannot go
    stale when the report is regenerated."""
    from envaudit.schema.result_line import kept_result_lines

    readme = (REPO / "README.md").read_text().replace("\n", " ")
    found = re.search(
        r"It counts (\d+) result lines of (\d+) solutions over (\d+) definitions,"
        r" (\d+) of them PASSED",
        readme,
    )
    assert found, "README no longer states the report's counts in the checked form"
    lines, solutions, definitions, passed = (int(n) for n in found.groups())
    summary = json.loads((DOCS / "summary.json").read_text())
    kept = list(kept_result_lines(DOCS / "results.jsonl").values())
    assert lines == summary["lines"] == len(kept)
    assert solutions == len({line.solution for line in kept})
    assert definitions == len(summary["definitions"])
    assert passed == sum(line.status == "PASSED" for line in kept)


def test_a_plain_merge_writes_under_results_not_docs(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    inputs = [str(REPO / "docs" / "results" / "h200" / "flashmla" / "flashmla-13.1.jsonl")]
    data = ["--data-root", str(REPO / "workloads"), "--solutions-root", str(REPO / "solutions")]
    result = CliRunner().invoke(app, ["merge", *inputs, *data])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "results" / "report" / "summary.json").is_file()
    assert not any((tmp_path / "docs").iterdir())


def test_the_report_s_reproduce_commands_run_as_printed(monkeypatch) -> None:
    """Every command `How to reproduce` prints runs from the repository root as printed: it
    reads its line and gets as far as the GPU it needs (here: none), never "cannot be read"."""
    import shlex

    monkeypatch.chdir(REPO)
    text = (DOCS / "performance.md").read_text()
    commands = re.findall(r"`(envaudit reproduce [^`]+)`", text)
    runnable = [c for c in commands if "RESULTS:N" not in c]
    assert len(runnable) >= 5
    for command in runnable[:3]:
        result = CliRunner().invoke(app, shlex.split(command)[1:])
        assert "cannot be read" not in result.output and "not a directory" not in result.output
        assert "the line ran on an NVIDIA" in result.output or result.exit_code in (0, 1), (
            command,
            result.output,
        )


def test_an_environment_comparison_says_what_its_locks_differ_in() -> None:
    """FlashMLA 13.1 against 13.3: the report states what the two locks differ in (read from
    locks/ by `envaudit merge`, as diff-env reads them), so the comparison says what it is of."""
    text = (DOCS / "performance.md").read_text()
    section = text.split("## Environment comparisons")[1]
    said = [line for line in section.splitlines() if "their locks differ" in line]
    flashmla = [line for line in said if line.startswith("flashmla-13.1 and flashmla-13.3")]
    assert len(flashmla) == 3
    assert "nvidia-cuda-nvcc: 13.1.115" in said[0] and "-> 13.3.73" in said[0]
    # TileLang's two builds, one run each, compared by the same rule
    [tilelang] = [line for line in said if line not in flashmla]
    assert tilelang.startswith("tilelang-0.1.12 and tilelang-0.1.15: their locks differ only in")
