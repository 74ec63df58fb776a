"""`envaudit compare BEFORE AFTER`: two result files (or report folders, or trace files) read
the way merge reads them, paired, and each pair given a verdict (report/compare.py).

The result keeps the comparison and renders it the ways the command line prints it: a Markdown
table, JSON, or the cells of a terminal table (the command line styles and lays them out).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envaudit.report import compare as comparing


@dataclass(frozen=True)
class CompareRequest:
    before: Path
    after: Path
    threshold_pct: float = 0.0
    """Slower/faster only when the interval lies wholly beyond 1 ± threshold_pct/100."""
    across_envs: bool = False
    """Pair lines of different envs (the env is no key)."""
    accept_newer: bool = False
    junit: Path | None = None
    """Also write JUnit XML here."""


@dataclass(frozen=True)
class PairRow:
    """One pair as the cells of a terminal table; `verdict` is the bare verdict, for its
    style."""

    verdict: str
    verdict_text: str
    solution: str
    workload: str
    env: str
    status: str
    ratio: str
    timing: str


@dataclass(frozen=True)
class CompareResult:
    comparison: comparing.Comparison
    findings: list[str]
    """What reading each side found (BEFORE's first), shown as warnings."""

    @property
    def exit_code(self) -> int:
        """1 on any slower, newly failing, lost or timing-flagged pair, else 0."""
        return self.comparison.exit_code

    @property
    def notes(self) -> list[str]:
        return self.comparison.notes

    def summary_line(self) -> str:
        return self.comparison.summary_line()

    def geomean_lines(self) -> list[str]:
        """Each solution's geometric mean of after/before with its interval and verdict."""
        return [comparing.geomean_line(geo) for geo in self.comparison.geomeans]

    def markdown(self) -> str:
        return comparing.render_markdown(self.comparison)

    def json_text(self) -> str:
        return comparing.render_json(self.comparison)

    def rows(self) -> list[PairRow]:
        """The pairs in their order (regressions first), as text."""
        return [
            PairRow(
                verdict=pair.verdict,
                verdict_text=comparing.verdict_text(pair),
                solution=pair.solution,
                workload=pair.label or pair.workload,
                env=comparing.env_text(pair),
                status=comparing.status_text(pair),
                ratio=comparing.ratio_text(pair),
                timing=pair.mode or "–",
            )
            for pair in self.comparison.pairs
        ]


def compare_results(request: CompareRequest) -> CompareResult:
    """Both sides read, paired and judged; the JUnit file written when asked. An EnvauditError
    (exit 2) for a side that cannot be used or a threshold out of range."""
    sides = (
        comparing.read_side(request.before, request.across_envs, request.accept_newer),
        comparing.read_side(request.after, request.across_envs, request.accept_newer),
    )
    result = comparing.compare_sides(
        *sides, threshold_pct=request.threshold_pct, across_envs=request.across_envs
    )
    if request.junit is not None:
        comparing.write_junit(result, request.junit)
    return CompareResult(result, [finding for side in sides for finding in side.findings])
