"""Short functions stay short: no function body under src/ runs past MAX_BODY_LINES (its
docstring not counted), and the count of those past WATCH_LINES may not grow past WATCHED
without this file saying so. The longest today (judge_main, the supervisor's _run_worker,
evaluate's _time) are near the first bound; a new long function is split, not waved through."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

MAX_BODY_LINES = 80
WATCH_LINES = 50
WATCHED = 9
"""Functions with bodies over WATCH_LINES lines on 2026-12-07."""


def body_lengths(src: Path) -> list[tuple[int, str]]:
    """(body lines, "path:function") of every function under `src`, its docstring left out."""
    found = []
    for path in sorted(src.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body
            first = body[0]
            documented = isinstance(first, ast.Expr) and isinstance(
                getattr(first, "value", None), ast.Constant
            )
            start = body[1].lineno if documented and len(body) > 1 else first.lineno
            end = node.end_lineno or start
            found.append((end - start + 1, f"{path.relative_to(src)}:{node.name}"))
    return found


def test_no_function_body_is_longer_than_the_bound() -> None:
    lengths = body_lengths(REPO / "src")
    too_long = sorted(f"{name} ({n} lines)" for n, name in lengths if n > MAX_BODY_LINES)
    assert not too_long, "split these: " + ", ".join(too_long)
    watched = sorted(name for n, name in lengths if n > WATCH_LINES)
    assert len(watched) <= WATCHED, f"{len(watched)} bodies over {WATCH_LINES} lines: {watched}"


def test_the_count_catches_an_injected_long_function(tmp_path: Path) -> None:
    module = tmp_path / "long.py"
    module.write_text("def f():\n    '''doc'''\n" + "    x = 1\n" * (MAX_BODY_LINES + 1))
    [(length, name)] = body_lengths(tmp_path)
    assert length == MAX_BODY_LINES + 1 and name == "long.py:f"
