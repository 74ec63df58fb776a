"""Result lines to FlashInfer-Bench traces and back.

Export writes `traces/<author>/<op_type>/<definition>.jsonl`, one Trace per result line, so a
FlashInfer-Bench reader (or leaderboard) can take our measurements as they are. Its Trace keeps
far less than our lines: the GPU name rather than its UUID, one latency rather than eager and
graph statistics, four library versions rather than our environment record. What it cannot hold
is dropped, not invented; what it can hold in an open field (Correctness.extra) keeps our
per-output matched counts.

Latency: the graph median where the solution has one, else the eager median. The reference
latency is the definition's baseline on the same workload and GPU model, its newest line there
(in the environment where it passed most), by the same rule: its graph median where it has one,
else its eager median. That is the report's one comparison rule (report/intervals.py
`speedup_of`), so a trace's speedup is the one summary.json prints. Without a passing baseline
line, reference and speedup are 0.

Statuses: FlashInfer-Bench knows seven; ours has two more, and its Evaluation allows correctness
figures only on PASSED and INCORRECT_NUMERICAL. So INPUT_MUTATED is exported as RUNTIME_ERROR (the
run broke the contract: it is never a candidate there), UNSUPPORTED_DEVICE as COMPILE_ERROR (no
build for this device), and correctness figures on any other status move into the log. Our own
status rides along in `environment.libs["envaudit_status"]` whenever theirs differs, and import
restores it, so no line is dropped and none changes its verdict.

Import (`trace_to_line`) is the converter `merge_files(paths, convert=...)` takes: a
FlashInfer-Bench trace becomes one of our result lines (parsed JSON, which merge then reads as
a ResultLine) with what the trace knows and None for the rest; a workload line (no evaluation)
yields None, which merge reports as a finding.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.report.intervals import figure_ms
from envaudit.report.summary import SolutionInfo, device_of, env_of
from envaudit.schema.models import Trace
from envaudit.schema.names import named_path
from envaudit.schema.result_line import (
    Correctness,
    Environment,
    ResultLine,
    as_result_line,
)
from envaudit.schema.results import RESULT_SCHEMA_VERSION
from envaudit.schema.writes import replace_text

LOG_LIMIT = 2000
UNKNOWN = "unknown"
# Entries of our environment record (fields of Environment) that describe software, carried as
# FlashInfer-Bench libs.
LIB_KEYS = (
    "python",
    "platform",
    "torch",
    "torch_cuda",
    "triton",
    "cudnn",
    "driver",
    "harness_version",
    "harness_hash",
    "distributions_fingerprint",
)
# Our own entries in libs, which import turns back into the line's context.
ENV_LIB = "envaudit_env"
CLOSURE_LIB = "closure_hash"
STATUS_LIB = "envaudit_status"
# What an imported trace knew that our lines have no place for (its reference latency and
# speedup), kept so that exporting it again loses nothing.
FOREIGN = "flashinfer_bench"
PER_OUTPUT_KEYS = ("output", "status", "matched", "total", "required", "nonfinite", "max_rel")
# Ours -> FlashInfer-Bench's, where it has no such status (module docstring).
THEIR_STATUS = {
    "INPUT_MUTATED": "RUNTIME_ERROR",
    "UNSUPPORTED_DEVICE": "COMPILE_ERROR",
    "WORKLOAD_ERROR": "RUNTIME_ERROR",
}
WITH_CORRECTNESS = ("PASSED", "INCORRECT_NUMERICAL")
NOT_MEASURED = Correctness(max_relative_error=math.nan, max_absolute_error=math.nan)

BaselineIndex = dict[tuple[str, str, str], ResultLine]  # definition, scope, workload
Scope = Callable[[ResultLine], str]  # a line's GPU: its device or its GPU model

# ---------------------------------------------------------------- export


def export_traces(
    lines: Iterable[ResultLine | Mapping[str, Any]],
    solutions: Mapping[str, SolutionInfo],
    definitions: Mapping[str, Mapping[str, Any]],
    workloads: Mapping[str, Mapping[str, Any]],
    out: Path,
) -> list[Path]:
    """Write one trace file per (author, op_type, definition) under out/traces; the paths
    written, sorted. Every trace is validated before anything is written."""
    files = render_traces(lines, solutions, definitions, workloads, out)
    for path, text in files.items():
        replace_text(path, text)
    return list(files)


def render_traces(
    lines: Iterable[ResultLine | Mapping[str, Any]],
    solutions: Mapping[str, SolutionInfo],
    definitions: Mapping[str, Mapping[str, Any]],
    workloads: Mapping[str, Mapping[str, Any]],
    out: Path,
) -> dict[Path, str]:
    """export_traces' files (path -> text, sorted by path), nothing written; ValueError naming
    the line when one is not a valid trace (a parsed line is read as a ResultLine first)."""
    read = [as_result_line(line) for line in lines]
    by_model = _baseline_index(read, solutions, _model_of)
    files: dict[Path, list[tuple[tuple[str, ...], str]]] = defaultdict(list)
    for line in read:
        info = solutions.get(line.solution)
        own = info is not None and info.baseline  # a baseline's speedup is 1 by definition
        baseline = line if own else by_model.get(_slot(line, _model_of))
        trace = line_to_trace(line, workloads, baseline)
        _validate(trace, line)
        files[_trace_path(line, solutions, definitions, out)].append(
            (_sort_key(line), json.dumps(trace, sort_keys=True, allow_nan=True))
        )
    return {path: "".join(text + "\n" for _, text in sorted(files[path])) for path in sorted(files)}


def _validate(trace: Mapping[str, Any], line: ResultLine) -> None:
    """Refuse the whole export on one bad trace: nothing is written until every trace has
    passed our model and FlashInfer-Bench's rules, which are stricter (its seven statuses;
    correctness only on PASSED and INCORRECT_NUMERICAL; performance only on PASSED)."""
    where = line.source or f"{line.solution} on {line.workload.uuid}"
    try:
        Trace.model_validate(trace)
    except ValidationError as exc:
        raise ValueError(f"{where}: not a valid FlashInfer-Bench trace: {exc}") from exc
    evaluation = trace.get("evaluation") or {}
    status = evaluation.get("status")
    problems = []
    if status in THEIR_STATUS:
        problems.append(f"status {status} is not one of FlashInfer-Bench's")
    if ("correctness" in evaluation) != (status in WITH_CORRECTNESS):
        problems.append(f"correctness {'on' if 'correctness' in evaluation else 'missing from'}")
    if ("performance" in evaluation) != (status == "PASSED"):
        problems.append(f"performance {'on' if 'performance' in evaluation else 'missing from'}")
    if problems:
        raise ValueError(
            f"{where}: not a valid FlashInfer-Bench trace: {'; '.join(problems)} (status {status})"
        )


def _trace_path(
    line: ResultLine,
    solutions: Mapping[str, SolutionInfo],
    definitions: Mapping[str, Mapping[str, Any]],
    out: Path,
) -> Path:
    info = solutions.get(line.solution)
    author = info.author if info else UNKNOWN
    definition = line.definition
    op_type = str((definitions.get(definition) or {}).get("op_type") or UNKNOWN)
    return named_path(out / "traces", author, op_type, f"{definition}.jsonl", what="path part")


def _sort_key(line: ResultLine) -> tuple[str, ...]:
    env, closure = env_of(line)
    return (
        line.workload.uuid,
        line.solution,
        device_of(line),
        env,
        str(closure or ""),
        str(line.timestamp or ""),
    )


def _model_of(line: ResultLine) -> str:
    return str(line.environment.gpu_name or "cpu")


def _slot(line: ResultLine, scope: Scope) -> tuple[str, str, str]:
    return (line.definition, scope(line), line.workload.uuid)


def _baseline_index(
    lines: list[ResultLine], solutions: Mapping[str, SolutionInfo], scope: Scope
) -> BaselineIndex:
    """The baseline's line per (definition, scope, workload): its newest, in the environment
    where it passed most workloads, as in summary.json (report/summary.py `_baseline_key`)."""
    runs: dict[tuple[str, str], dict[tuple[str, ...], list[ResultLine]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for line in lines:
        info = solutions.get(line.solution)
        if info is not None and info.baseline and info.definition == line.definition:
            env, closure = env_of(line)
            runs[(line.definition, scope(line))][(env, str(closure or ""))].append(line)
    index: BaselineIndex = {}
    for (definition, where), found in runs.items():
        newest: dict[str, dict[str, ResultLine]] = {}
        for run, members in found.items():
            ordered = sorted(members, key=lambda ln: ln.timestamp or "")
            newest[str(run)] = {ln.workload.uuid: ln for ln in ordered}
        chosen = max(newest, key=lambda k: (sum(ln.passed for ln in newest[k].values()), k))
        for uuid, line in newest[chosen].items():
            index[(definition, where, uuid)] = line
    return index


def line_to_trace(
    line: ResultLine | Mapping[str, Any],
    workloads: Mapping[str, Mapping[str, Any]],
    baseline: ResultLine | Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One FlashInfer-Bench Trace (as plain JSON) for one of our result lines (a parsed line is
    read as a ResultLine first)."""
    line = as_result_line(line)
    return {
        "definition": line.definition,
        "workload": _workload(line, workloads),
        "solution": line.solution,
        "evaluation": _evaluation(line, None if baseline is None else as_result_line(baseline)),
    }


def _workload(line: ResultLine, workloads: Mapping[str, Mapping[str, Any]]) -> Any:
    ours = line.workload
    known = workloads.get(ours.uuid)
    if known is not None:
        return dict(known)
    return {
        "uuid": ours.uuid,
        "axes": dict(ours.axes),
        "inputs": dict(ours.inputs or {}),  # an imported trace's own
    }


def _evaluation(line: ResultLine, baseline: ResultLine | None) -> dict[str, Any]:
    ours = line.status
    theirs = THEIR_STATUS.get(ours, ours)
    message = line.message
    environment = _environment(line)
    if theirs != ours:
        environment["libs"][STATUS_LIB] = ours
        message = f"{ours}: {message}" if message else ours
    correctness = line.correctness
    evaluation: dict[str, Any] = {"status": theirs, "environment": environment}
    if theirs in WITH_CORRECTNESS:  # required there; NaN says "not measured"
        evaluation["correctness"] = _correctness(correctness or NOT_MEASURED)
    elif correctness is not None:  # their model forbids the block on this status
        text = json.dumps(_correctness(correctness), sort_keys=True, allow_nan=True)
        message = f"{message}\ncorrectness: {text}" if message else f"correctness: {text}"
    evaluation["log"] = _log(message)
    evaluation["timestamp"] = str(line.timestamp or UNKNOWN)
    if ours == "PASSED":
        evaluation["performance"] = _performance(line, baseline)
    return evaluation


def _log(message: str) -> str:
    if len(message) <= LOG_LIMIT:
        return message
    return message[:LOG_LIMIT] + f" ... [{len(message) - LOG_LIMIT} more characters]"


def _environment(line: ResultLine) -> dict[str, Any]:
    record = line.environment
    env, closure = env_of(line)
    libs = {k: str(value) for k in LIB_KEYS if (value := _lib(record, k)) is not None}
    libs[ENV_LIB] = env
    if closure is not None:
        libs[CLOSURE_LIB] = str(closure)
    return {"hardware": str(record.gpu_name or "cpu"), "libs": libs}


def _lib(record: Environment, name: str) -> object:
    """One entry of LIB_KEYS, each a field of Environment."""
    return getattr(record, name)


def _correctness(ours: Correctness) -> dict[str, Any]:
    """FlashInfer-Bench's figures: its relative error (`max_rel_eps`, recorded by harnesses since
    it was added) where every float output has it, else ours (`max_rel`, which counts an element
    whose reference is 0 by its absolute error); our own per output in `extra`."""
    correctness: dict[str, Any] = {
        "max_relative_error": _their_relative_error(ours),
        "max_absolute_error": float(ours.max_absolute_error or 0.0),
    }
    outputs = [
        out.model_dump(include=set(PER_OUTPUT_KEYS), exclude_unset=True) for out in ours.outputs
    ]
    if outputs:
        correctness["extra"] = {"outputs": outputs}
    return correctness


def _their_relative_error(ours: Correctness) -> float:
    figures = [o.max_rel_eps for o in ours.outputs]
    known = [f for f in figures if f is not None]
    if figures and len(known) == len(figures):
        return float(max(known))
    return float(ours.max_relative_error or 0.0)


def _performance(line: ResultLine, baseline: ResultLine | None) -> dict[str, Any]:
    latency = figure_ms(line) or 0.0
    reference = (figure_ms(baseline) or 0.0) if baseline is not None and baseline.passed else 0.0
    speedup = reference / latency if latency and reference else 0.0
    known = line.flashinfer_bench.performance if line.flashinfer_bench else None
    if not reference and known and known.reference_latency_ms:  # no baseline: the trace's own
        reference = float(known.reference_latency_ms)
        speedup = float(known.speedup_factor or 0.0)
    return {"latency_ms": latency, "reference_latency_ms": reference, "speedup_factor": speedup}


# ---------------------------------------------------------------- import


def trace_to_line(trace: Mapping[str, Any]) -> dict[str, Any] | None:
    """Our result line for a FlashInfer-Bench trace; None for a workload line (no evaluation).
    Lenient by design: a field the trace lacks becomes None rather than failing the merge."""
    evaluation = trace.get("evaluation")
    if not isinstance(evaluation, Mapping):
        return None
    workload = trace.get("workload") or {}
    environment = evaluation.get("environment") or {}
    libs = {str(k): str(v) for k, v in (environment.get("libs") or {}).items()}
    hardware = str(environment.get("hardware") or "cpu")
    return {
        "schema_version": RESULT_SCHEMA_VERSION,
        "definition": trace.get("definition"),
        "workload": {
            "uuid": workload.get("uuid"),
            "label": workload.get("label"),
            "axes": dict(workload.get("axes") or {}),
            "inputs": dict(workload.get("inputs") or {}),
        },
        "solution": trace.get("solution"),
        "solution_hash": None,
        "status": libs.get(STATUS_LIB) or evaluation.get("status"),
        "message": str(evaluation.get("log") or ""),
        "correctness": _our_correctness(evaluation.get("correctness")),
        "timing": _our_timing(evaluation.get("performance")),
        "context": _our_context(libs, hardware),
        "environment": _our_environment(libs, hardware),
        "timestamp": evaluation.get("timestamp"),
        FOREIGN: {"performance": dict(evaluation.get("performance") or {})},
    }


def _our_correctness(theirs: Any) -> dict[str, Any] | None:
    if not isinstance(theirs, Mapping):
        return None
    correctness: dict[str, Any] = {
        "max_absolute_error": theirs.get("max_absolute_error", 0.0),
        "max_relative_error": theirs.get("max_relative_error", 0.0),
    }
    outputs = (theirs.get("extra") or {}).get("outputs")
    if isinstance(outputs, list):
        correctness["outputs"] = outputs
    return correctness


def _our_timing(performance: Any) -> dict[str, Any] | None:
    latency = (performance or {}).get("latency_ms") if isinstance(performance, Mapping) else None
    if not isinstance(latency, int | float) or latency <= 0:
        return None
    return {"eager": {"mode": "flashinfer-bench", "median_ms": float(latency)}}


def _our_context(libs: Mapping[str, str], hardware: str) -> dict[str, Any]:
    """Our own exports name their environment in libs; a foreign trace's environment is
    identified by its library versions, so two library sets never merge as one."""
    plain = {k: v for k, v in libs.items() if k not in (ENV_LIB, CLOSURE_LIB, STATUS_LIB)}
    joined = ";".join(f"{k}={v}" for k, v in sorted(plain.items()))
    return {
        "runtime": "flashinfer-bench",
        "env": libs.get(ENV_LIB) or joined or "flashinfer-bench",
        "closure_hash": libs.get(CLOSURE_LIB) or None,
        "image_id": None,
        "device_id": hardware,
    }


def _our_environment(libs: Mapping[str, str], hardware: str) -> dict[str, Any]:
    plain = {k: v for k, v in libs.items() if k not in (ENV_LIB, CLOSURE_LIB, STATUS_LIB)}
    gpu = hardware if hardware != "cpu" else None
    return {**plain, "gpu_name": gpu, "gpu_uuid": None}
