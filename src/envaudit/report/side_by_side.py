"""A recorded result line beside the same workload run again: status, correctness figures, and
the time now/then with its 95% interval (envaudit.report.intervals) and a verdict.

Verdicts: "same" (the status is the same and the interval holds 1.0), "faster" / "slower" (the
interval excludes 1.0), "not reproduced" (the status changed), "not comparable" (a side has no
timing, or both failed the same way, when only the status can be compared). The time is that of
the report's one comparison rule (report/intervals.py `speedup_of`): each line's graph figure
where it has one, else its eager one, the modes named when they differ.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError
from envaudit.report.intervals import speedup_of
from envaudit.report.traces import trace_to_line
from envaudit.schema.reading import UnreadableFile, json_lines, loads_json
from envaudit.schema.result_line import ResultLine, problems


@dataclass(frozen=True)
class RunTiming:
    """The time now over then by the one comparison rule (report/intervals.py `speedup_of`)."""

    mode: str
    """One mode where both lines were timed by it, else both ("graph/eager": then's first)."""
    modes: str
    """The figures divided, then's first."""
    median_ms: list[float]
    """[then, now]."""
    ratio_now_then: float
    ci95: list[float]
    log_variance: float
    """The variance of log ratio_now_then."""
    caveats: list[str] = field(default_factory=list)

    @property
    def modes_then(self) -> str:
        return self.modes.split("/")[0]

    @property
    def modes_now(self) -> str:
        return self.modes.split("/")[1]


@dataclass(frozen=True)
class RunComparison:
    """One recorded line beside the same workload run again; every list is [then, now]."""

    solution: str
    workload: str
    status: list[str]
    max_absolute_error: list[float | None]
    max_relative_error: list[float | None]
    closure_hash: list[str | None]
    gpu: list[str]
    verdict: str
    timing: RunTiming | None = None

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        if self.timing is None:
            del found["timing"]
        return found


def run_timing(
    then: ResultLine, now: ResultLine, observed: tuple[float | None, float | None] = (None, None)
) -> RunTiming | None:
    """now / then by the report's one comparison rule, or None without a figure on a side;
    `observed`: the scatter of each side's repeated runs (then's, now's), where known."""
    found = speedup_of(now, then, (observed[1], observed[0]), names=("now", "then"))
    if found is None:
        return None
    ratio = found.inverse()
    return RunTiming(
        mode=found.mode if found.base_mode == found.mode else found.modes,
        modes=found.modes,
        median_ms=[found.base_ms, found.line_ms],
        ratio_now_then=ratio.value,
        ci95=list(ratio.ci95),
        log_variance=found.log_variance,
        caveats=list(found.caveats),
    )


def compare_runs(then: ResultLine, now: ResultLine) -> RunComparison:
    """The side-by-side: both statuses and figures, the ratio now/then, the verdict."""
    timing = run_timing(then, now)
    return RunComparison(
        solution=now.solution,
        workload=now.workload.label or now.workload.uuid,
        status=[then.status, now.status],
        max_absolute_error=[
            _error(then, "max_absolute_error"),
            _error(now, "max_absolute_error"),
        ],
        max_relative_error=[
            _error(then, "max_relative_error"),
            _error(now, "max_relative_error"),
        ],
        closure_hash=[_closure(then), _closure(now)],
        gpu=[_gpu(then), _gpu(now)],
        verdict=_verdict(then.status, now.status, timing),
        timing=timing,
    )


def reproduced(comparison: RunComparison) -> int:
    """The exit code: 0 when the run reproduces the line within noise, else 1."""
    return EXIT_OK if comparison.verdict == "same" else EXIT_FAILED


def _verdict(then: str, now: str, timing: RunTiming | None) -> str:
    if then != now:
        return "not reproduced"
    if timing is None or not timing.ci95:
        return "same" if then != "PASSED" else "not comparable"
    low, high = timing.ci95
    if low <= 1.0 <= high:
        return "same"
    return "faster" if high < 1.0 else "slower"


def _error(
    line: ResultLine, key: Literal["max_absolute_error", "max_relative_error"]
) -> float | None:
    figures = line.correctness
    if figures is None:
        return None
    value = (
        figures.max_absolute_error if key == "max_absolute_error" else figures.max_relative_error
    )
    return None if value is None else float(value)


def _closure(line: ResultLine) -> str | None:
    return line.closure_hash or None


def _gpu(line: ResultLine) -> str:
    env = line.environment
    parts = (env.gpu_name or "cpu", env.gpu_uuid, env.driver)
    return " ".join(str(p) for p in parts if p)


def render_comparison(comparison: RunComparison, notes: list[str]) -> str:
    rows = [f"{comparison.solution} / {comparison.workload}", ""]
    rows += [f"  {note}" for note in notes]
    rows += ["", f"  {'':22}{'then':>24}  {'now':>24}"]

    def row(name: str, pair: Sequence[object]) -> None:
        rows.append(f"  {name:22}{_cell(pair[0]):>24}  {_cell(pair[1]):>24}")

    row("status", comparison.status)
    row("max absolute error", comparison.max_absolute_error)
    row("max relative error", comparison.max_relative_error)
    row("closure", [(c or "none")[:16] for c in comparison.closure_hash])
    timing = comparison.timing
    if timing is not None:
        row(f"median ms ({timing.mode})", timing.median_ms)
        ci = timing.ci95
        interval_text = f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""
        rows.append(f"  {'now / then':22}{timing.ratio_now_then:>24.4f}{interval_text}")
    rows += ["", f"verdict: {comparison.verdict}"]
    return "\n".join(rows) + "\n"


def _cell(value: object) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def as_json(comparison: RunComparison, notes: list[str]) -> str:
    return json.dumps({**comparison.as_dict(), "notes": notes}, indent=1) + "\n"


def read_recorded(
    spec: str, solution: str | None = None, workload: str | None = None
) -> tuple[ResultLine, str]:
    """(the line, "file:number") named by FILE:N (1-based), or by FILE and the selectors (the
    newest line matching them). A FlashInfer-Bench trace line is read as our line; a line the
    result line model refuses is no result line (named by FILE:N, the error says why)."""
    path_text, _, number = spec.rpartition(":")
    if not number.isdigit() or not path_text:
        path_text, number = spec, ""
    path = Path(path_text)
    found = []
    refused = ""
    for index, parsed in _parsed_lines(path, int(number) if number else None):
        if not isinstance(parsed, dict):
            continue
        raw = trace_to_line(parsed) if "evaluation" in parsed else parsed
        if not isinstance(raw, dict) or "solution" not in raw:
            continue
        try:
            line = ResultLine.model_validate(raw)
        except ValidationError as exc:
            refused = f" ({problems(exc)})"
            continue
        if solution and line.solution != solution:
            continue
        if workload and workload not in (line.workload.uuid, line.workload.label):
            continue
        found.append((str(line.timestamp or ""), index, line))
    if not found and number:
        raise EnvauditError(f"{path} has no line {number} that is a result line{refused}")
    if not found:
        wanted = ", ".join(x for x in (solution, workload) if x) or "a result line"
        raise EnvauditError(f"{spec}: no line matches ({wanted})")
    if not number and not (solution and workload):
        raise EnvauditError(
            f"{spec}: name one line, as FILE:N or with --solution and --workload",
            hint=f"{len(found)} lines there",
        )
    _, index, line = max(found, key=lambda item: (item[0], item[1]))
    return line, f"{path}:{index}"


def _parsed_lines(path: Path, number: int | None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) of each non-empty line, or of line `number` only (reading
    stops there); bounded lines of a regular file (schema.reading), an EnvauditError (exit 2)
    naming the file for anything else. A line that is not JSON is skipped, unless it is the
    one named."""
    try:
        for line in json_lines(path):
            if number is not None and line.number != number:
                continue
            if line.text.strip():
                try:
                    yield line.number, loads_json(line.text, f"{path}:{line.number}")
                except json.JSONDecodeError:
                    if number is not None:
                        raise EnvauditError(f"{path}:{line.number} is not JSON") from None
            if number is not None:
                return
    except UnreadableFile as exc:
        raise EnvauditError(str(exc), hint="name a result or trace file") from None
    except OSError as exc:
        raise EnvauditError(f"{path}: cannot be read: {exc.strerror or exc}") from None
