"""Resolve a run request (solution name, workload selection, device) into a harness job.

The resolved job names absolute files, the exact workload UUIDs and the device, so the harness
needs nothing but the job to run; every problem with the request is a RunRequestError that
names the solution, definition, suite or workload at fault.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.dataset.traceset import DatasetRootError, TraceSet, load_traceset
from envaudit.schema.models import Solution


class RunRequestError(ValueError):
    """The request cannot be resolved (unknown solution, definition, suite, workload)."""


@dataclass
class RunRequest:
    solution: str
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    workloads: list[str] = field(default_factory=list)
    suite: str | None = None
    device: str | None = None
    gpu: str | None = None
    validation_only: bool = False
    graph_timing: bool = False
    reference_cache: Path | None = None
    report: Path | None = None
    runtime: str = "host"


def find_solution(name: str, solutions_root: Path) -> tuple[Path, Solution]:
    """solutions/<name>/solution.json (or a path to a solution.json / its folder)."""
    candidates = [Path(name), Path(name) / "solution.json", solutions_root / name / "solution.json"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        known = sorted(p.parent.name for p in solutions_root.glob("*/solution.json"))
        hint = f" Known: {', '.join(known)}" if known else ""
        raise RunRequestError(f"no solution {name} under {solutions_root}/.{hint}")
    try:
        return path.resolve(), Solution.model_validate(json.loads(path.read_text()))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise RunRequestError(f"{path}: not a valid solution: {exc}") from None


def select_workloads(ts: TraceSet, definition: str, req: RunRequest) -> list[str]:
    own = [w.uuid for w in ts.workloads_of(definition)]
    if req.workloads:
        unknown = [u for u in req.workloads if u not in own]
        if unknown:
            raise RunRequestError(f"workload {unknown[0]} is not a workload of {definition}")
        return list(req.workloads)
    if req.suite:
        try:
            members = ts.suite_uuids(req.suite)
        except KeyError:
            raise RunRequestError(
                f"no suite {req.suite} in {ts.root}/suites (have: {', '.join(ts.suites)})"
            ) from None
        return [u for u in own if u in members]
    return own


def device_of(req: RunRequest) -> tuple[str, str, dict[str, str]]:
    """(torch device inside the job, device identity for the record, env overrides)."""
    if req.gpu and req.device:
        raise RunRequestError("give either --gpu or --device, not both")
    if req.gpu:
        if not req.gpu.startswith(("GPU-", "MIG-")):
            raise RunRequestError(f"--gpu takes a GPU UUID (GPU-...), got {req.gpu}")
        return "cuda:0", req.gpu, {"CUDA_VISIBLE_DEVICES": req.gpu}
    if req.device == "cpu":
        return "cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}
    raise RunRequestError("choose where to run: --device cpu or --gpu GPU-<uuid>")


def plan_job(req: RunRequest) -> tuple[dict[str, Any], dict[str, str]]:
    """The harness job for this request, and the environment overrides for its worker."""
    solution_file, solution = find_solution(req.solution, req.solutions_root)
    try:
        ts = load_traceset(req.data_root)
    except DatasetRootError as exc:
        raise RunRequestError(str(exc)) from None
    dfile = ts.definitions.get(solution.definition)
    if dfile is None:
        raise RunRequestError(
            f"solution {solution.name} implements {solution.definition}, "
            f"which is not a definition under {req.data_root}"
        )
    op_type = dfile.definition.op_type
    workload_file = req.data_root / "workloads" / op_type / f"{solution.definition}.jsonl"
    uuids = select_workloads(ts, solution.definition, req)
    if not uuids:
        raise RunRequestError(f"no workloads of {solution.definition} selected")
    device, device_id, env = device_of(req)
    tag = "cpu" if device == "cpu" else device_id
    report = req.report or Path("results") / f"{solution.name}.{tag}.jsonl"
    job = {
        "definition": solution.definition,
        "solution": solution.name,
        "definition_file": str((req.data_root / dfile.path).resolve()),
        "workload_file": str(workload_file.resolve()),
        "data_root": str(req.data_root.resolve()),
        "solution_file": str(solution_file),
        "workloads": uuids,
        "device": device,
        "report": str(report.resolve()),
        "validation_only": req.validation_only,
        "graph_timing": req.graph_timing,
        "reference_cache": str(req.reference_cache.resolve()) if req.reference_cache else None,
        "context": {
            "runtime": req.runtime,
            "env": solution.env,
            "closure_hash": None,
            "image_id": None,
            "device_id": device_id,
        },
    }
    return job, env
