"""report.html in a real headless Chromium (Debian's `chromium`, installed by .ci/run): it loads
with no console message, its script runs, tables sort and rows filter; and it fetches nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from envaudit.settings import REQUIRE_CHROMIUM, value

REPORT = Path("docs/report/report.html")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# CI installs chromium and sets ENVAUDIT_REQUIRE_CHROMIUM: there a missing browser fails the
# tests instead of skipping them.
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not value(REQUIRE_CHROMIUM),
    reason="needs chromium (.ci/run installs it)",
)


def chromium(tmp_path: Path, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """One headless page load; a profile of its own so runs never share state."""
    assert CHROMIUM is not None
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    args += [f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    return subprocess.run(
        [*args, *extra, url], capture_output=True, text=True, timeout=120, check=False
    )


def dom(tmp_path: Path, fragment: str = "") -> tuple[str, str]:
    done = chromium(tmp_path, REPORT.resolve().as_uri() + fragment, "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


def table_column(page: str, table_id: str, column: int) -> list[str]:
    body = page.split(f'id="{table_id}"', 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)[1:]  # [0] is the header row
    return [
        re.sub(r"<[^>]+>", "", re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)[column]) for r in rows
    ]


def test_the_committed_report_loads_without_a_console_message(tmp_path: Path) -> None:
    page, log = dom(tmp_path)
    assert 'data-ready="1"' in page  # the script ran to its end
    assert not re.findall(r"CONSOLE.*", log)


def test_tables_sort_from_the_address(tmp_path: Path) -> None:
    # the largest at-a-glance table (one per GPU model): the H200's
    plain, _ = dom(tmp_path)
    tables = sorted(set(re.findall(r'id="(glance-\d+)"', plain)))
    glance = max(tables, key=lambda t: len(table_column(plain, t, 0)))
    page, _ = dom(tmp_path, f"#sort={glance}:4:desc")
    speedups = [float(x.rstrip("x")) for x in table_column(page, glance, 4) if x != "–"]
    assert len(speedups) > 10 and speedups == sorted(speedups, reverse=True)
    page, _ = dom(tmp_path, f"#sort={glance}:0:asc")
    names = table_column(page, glance, 0)
    assert names == sorted(names) and names != table_column(plain, glance, 0)[::-1]


def test_rows_filter_from_the_address(tmp_path: Path) -> None:
    page, _ = dom(tmp_path, "#filter=flashinfer")
    shown = re.search(r'id="shown"[^>]*>(\d+) of (\d+) rows<', page)
    assert shown is not None
    hits, total = int(shown[1]), int(shown[2])
    assert 0 < hits < total
    tags = re.findall(r"<tr\b[^>]*>", page)
    visible = [t for t in tags if "title=" in t and "hidden" not in t]
    assert 0 < len(visible) <= hits and all("flashinfer" in t.lower() for t in visible)
    sections = re.findall(r'<section class="definition( hidden)?">\s*<h2 id="def-([^"]+)"', page)
    shown_defs = sorted(name for hidden, name in sections if not hidden)
    assert shown_defs == ["gdn_decode_qk4_v8_d128_k_last", "gdn_prefill_qk4_v8_d128_k_last"]


def test_the_page_is_self_contained() -> None:
    text = REPORT.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text)
    assert "default-src 'none'" in text  # and the browser is told to fetch nothing
    plots = re.findall(r'<img class="plot"[^>]*src="data:image/svg\+xml;base64,', text)
    summary = json.loads(Path("docs/report/summary.json").read_text())
    svgs = list(Path("docs/report/plots").glob("*.svg"))
    rooflines = [p for p in svgs if p.name.startswith("roofline.")]  # one per GPU model
    assert len(plots) == len(svgs) - len(rooflines) and len(rooflines) == 2
    assert summary["lines"] > 0


def test_names_from_data_are_escaped(tmp_path: Path) -> None:
    from envaudit.report.html import render_html
    from envaudit.schema.summary import EnvironmentInfo, Preferred, Summary

    evil = "<script>alert(1)</script>"
    summary = Summary(
        lines=0,
        definitions={},
        environments=[EnvironmentInfo(env=evil, runtime="host", python="3.12", torch="2.11")],
    )
    text = render_html(summary, Preferred(rule="r", choices={}), {}, tmp_path, evil)
    assert evil not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_a_screenshot_renders(tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    done = chromium(
        tmp_path, REPORT.resolve().as_uri(), f"--screenshot={shot}", "--window-size=1400,1000"
    )
    assert done.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a page with tables drawn, not a blank one
