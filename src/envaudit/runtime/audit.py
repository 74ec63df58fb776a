"""`envaudit audit` on the host runtime: every selected solution on every selected device.

This is the host-runtime form of the audit (one process tree, sequential jobs); container
runtimes, executors and the merged report come with the later issues. Lines from every job go
to one results file, so `--resume` continues an interrupted audit where it stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.runtime.host import run_on_host
from envaudit.runtime.jobs import RunRequest, RunRequestError
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
            )
            try:
                run_on_host(request, resume=plan.resume)
            except RunRequestError as exc:
                result.errors.append(f"{name}: {exc}")
    for _, line in read_lines(report):
        if line:
            result.statuses[line["status"]] += 1
    return result
