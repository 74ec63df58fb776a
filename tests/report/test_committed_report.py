"""`make report` (`envaudit merge $(REPORT_LINES) --out docs/`, the result files the Makefile
names) reproduces the committed report byte for byte, apart from the generation time (and the
--out folder named in the command line)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from envaudit.cli import app
from tests.conftest import REPO

DOCS = REPO / "docs"
VOLATILE = re.compile(rb'^.*("generated_at"|Generated \d{4}-).*$', re.MULTILINE)


def _masked(path: Path) -> bytes:
    return VOLATILE.sub(b"<generated>", path.read_bytes())


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
    different = [str(rel) for rel in produced if _masked(out / rel) != _masked(DOCS / rel)]
    assert not different, "regenerate with `make report` and commit: " + ", ".join(different)
    committed_plots = {p.relative_to(DOCS) for p in (DOCS / "plots").iterdir()}
    assert committed_plots == {p for p in produced if p.parts[0] == "plots"}
