"""Resolve a run request (solution name, workload selection, device) into a harness job.

The resolved job names absolute files, the exact workload UUIDs and the device, so the harness
needs nothing but the job to run; every problem with the request is a RunRequestError that
names the solution, definition, suite or workload at fault.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.dataset.traceset import DatasetRootError, TraceSet, load_traceset
from envaudit.errors import EnvauditError
from envaudit.schema.models import Solution


class RunRequestError(EnvauditError):
    """The request cannot be resolved (unknown solution, definition, suite, workload, device):
    a usage error (exit 2)."""


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


@dataclass(frozen=True)
class RunContext:
    """Where a job runs, recorded as `context` on every line it produces, whatever the runtime.

    `closure_hash` is always the closure of `env`, the lock the line is attributed to: for the
    host runtime the declared lock (whether this interpreter matches it is in `env_check`)."""

    runtime: str
    env: str | None
    declared_env: str | None
    device_id: str
    closure_hash: str | None = None
    image_id: str | None = None
    image_digest: str | None = None
    gpu_access: str | None = None
    env_check: Mapping[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "runtime": self.runtime,
            "env": self.env,
            "closure_hash": self.closure_hash,
            "image_id": self.image_id,
            "image_digest": self.image_digest,
            "device_id": self.device_id,
        }
        if self.gpu_access is not None:
            found["gpu_access"] = self.gpu_access
        if self.env_check is not None:
            found["env_check"] = dict(self.env_check)
        if self.declared_env != self.env:
            found["declared_env"] = self.declared_env
        return found


@dataclass(frozen=True)
class Job:
    """One solution on its selected workloads on one device: everything the worker needs, with
    host paths; a launcher says how those paths appear to the worker."""

    definition: str
    solution: str
    definition_file: Path
    workload_file: Path
    data_root: Path
    solution_file: Path
    workloads: tuple[str, ...]
    device: str
    report: Path
    context: RunContext
    validation_only: bool = False
    graph_timing: bool = False
    reference_cache: Path | None = None
    device_env: Mapping[str, str] = field(default_factory=dict)
    """Variables that select the device for the worker (CUDA_VISIBLE_DEVICES)."""

    def with_context(self, **changes: Any) -> Job:
        return replace(self, context=replace(self.context, **changes))

    def env_to_run(self, override: str | None) -> str:
        """The lock this job runs in: the override, else the one the solution declares."""
        env = override or self.context.declared_env
        if env is None:
            raise RunRequestError(
                f"solution {self.solution} declares no environment (no `env` in its solution.json)",
                hint="pass --env ENV to run it in a lock of locks/",
            )
        return env

    def worker_view(
        self, seen_as: Callable[[Path], str], workloads: Sequence[str]
    ) -> dict[str, Any]:
        """job.json for the worker: these workloads, paths as the worker sees them."""
        cache = self.reference_cache
        return {
            "definition": self.definition,
            "solution": self.solution,
            "definition_file": seen_as(self.definition_file),
            "workload_file": seen_as(self.workload_file),
            "data_root": seen_as(self.data_root),
            "solution_file": seen_as(self.solution_file),
            "workloads": list(workloads),
            "device": self.device,
            "validation_only": self.validation_only,
            "graph_timing": self.graph_timing,
            "reference_cache": seen_as(cache) if cache is not None else None,
            "context": self.context.record(),
        }


def plan_job(req: RunRequest, runtime: str) -> Job:
    """The job for this request, before the runtime fills in its part of the context."""
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
    device, device_id, device_env = device_of(req)
    tag = "cpu" if device == "cpu" else device_id
    report = req.report or Path("results") / f"{solution.name}.{tag}.jsonl"
    return Job(
        definition=solution.definition,
        solution=solution.name,
        definition_file=(req.data_root / dfile.path).resolve(),
        workload_file=workload_file.resolve(),
        data_root=req.data_root.resolve(),
        solution_file=solution_file,
        workloads=tuple(uuids),
        device=device,
        report=report.resolve(),
        validation_only=req.validation_only,
        graph_timing=req.graph_timing,
        reference_cache=req.reference_cache.resolve() if req.reference_cache else None,
        device_env=device_env,
        context=RunContext(
            runtime=runtime, env=solution.env, declared_env=solution.env, device_id=device_id
        ),
    )
