"""`envaudit audit`: every selected solution on every selected device, one job at a time.

Runtimes: `host` (this interpreter) and `local` (each solution in a uv venv built from its
declared lock and the store, or from one lock named with `env`). Container runtimes and other
executors come with later issues. Lines from every job go to one results file, so `--resume`
continues an interrupted audit where it stopped; a solution whose environment cannot be made
is reported and the audit goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.lock.config import FetchConfig
from envaudit.lock.files import LockError
from envaudit.runtime.host import run_on_host
from envaudit.runtime.jobs import RunRequest, RunRequestError
from envaudit.runtime.local import run_in_local_environment
from envaudit.schema.results import read_lines

# Statuses that do not fail an audit: the solution was not meant for this device.
NOT_FAILURES = {"PASSED", "UNSUPPORTED_DEVICE"}


@dataclass
class AuditPlan:
    solutions: list[str]
    devices: list[tuple[str | None, str | None]]
    """(gpu uuid, device) pairs: exactly one of the two is set."""
    out: Path
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    suite: str | None = None
    graph_timing: bool = True
    resume: bool = False
    runtime: str = "host"
    env: str | None = None
    """local runtime: run every solution in this lock instead of the one it declares."""


@dataclass
class AuditResult:
    report: Path
    statuses: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(s not in NOT_FAILURES for s in self.statuses)


def all_solutions(solutions_root: Path) -> list[str]:
    return sorted(p.parent.name for p in solutions_root.glob("*/solution.json"))


def run_audit(plan: AuditPlan, on_job: Callable[[str, str], None] | None = None) -> AuditResult:
    report = plan.out / "results.jsonl"
    result = AuditResult(report)
    for gpu, device in plan.devices:
        suite = plan.suite or ("dev" if gpu else "smoke")
        for name in plan.solutions:
            if on_job:
                on_job(name, gpu or device or "")
            request = RunRequest(
                solution=name,
                data_root=plan.data_root,
                solutions_root=plan.solutions_root,
                suite=suite,
                gpu=gpu,
                device=device,
                graph_timing=plan.graph_timing and gpu is not None,
                reference_cache=plan.out / "reference-cache",
                report=report,
                runtime=plan.runtime,
            )
            try:
                if plan.runtime == "local":
                    config = FetchConfig.from_environment()
                    run_in_local_environment(request, plan.env, config, resume=plan.resume)
                else:
                    run_on_host(request, resume=plan.resume)
            except RunRequestError as exc:
                result.errors.append(f"{name}: {exc}")
            except LockError as exc:
                hint = f"; {exc.hint}" if exc.hint else ""
                result.errors.append(f"{name}: {exc}{hint}")
    for _, line in read_lines(report):
        if line:
            result.statuses[line["status"]] += 1
    return result
