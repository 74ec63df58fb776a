"""`envaudit audit`: every selected solution on the selected devices, one job per device at a
time and every device at once (GPUs of one model share one queue, longest jobs first).

Runtimes come from the registry (runtime/registry.py): with a container runtime the images of
the environments needed are built first, when missing. Lines from every job go to one results
file, so `--resume` continues an interrupted audit where it stopped; a solution whose
environment cannot be made is reported with its hint, and the audit goes on.

On a GPU, the next job is prepared and its first worker started (gated: it makes its CUDA
context, records its environment and imports what its solution's first call would, then waits)
as soon as the current job's worker has started, so a job begins where the previous one ends
(runtime/supervision/supervisor.py, StagedWorker). The container runtimes start two jobs ahead,
since a container's start outlasts short jobs. `ENVAUDIT_STAGE_NEXT=N` starts N ahead; 0 turns
staging off: each job then starts once the previous one has sent its last line, as `envaudit run`
does.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from envaudit.dataset.solutions import SolutionIndex, index_solutions, solution_roots
from envaudit.dataset.traceset import DatasetRootError, TraceSet, load_traceset
from envaudit.errors import EnvauditError, WriteFailed
from envaudit.lock.dependencies import BuildTools, check_dependencies
from envaudit.lock.files import load_lock
from envaudit.runtime.base import RunOptions, Runtime
from envaudit.runtime.devices import gpus, require_gpu
from envaudit.runtime.jobs import (
    RunRequest,
    assigned_env,
    check_cache,
    check_evaluation,
    check_output,
    check_report,
    device_of,
    find_solution,
    select_workloads,
)
from envaudit.runtime.registry import get_runtime
from envaudit.runtime.scheduling.slurm import (
    Task,
    array_record,
    check_slurm,
    merge_task_reports,
    run_tasks,
)
from envaudit.runtime.scheduling.steps import (
    PreparedJob,
    plan_run,
    prepare,
    run_job,
    stage,
    supervise,
)
from envaudit.runtime.supervision.launchers import server_idle_s
from envaudit.runtime.supervision.supervisor import Handoff
from envaudit.runtime.timeline import mark
from envaudit.schema.models import Solution
from envaudit.schema.names import shown
from envaudit.schema.options import EvalOptions
from envaudit.schema.result_line import kept_result_lines, result_lines
from envaudit.schema.results import CPU, line_key
from envaudit.schema.slurm import SlurmSettings
from envaudit.schema.sources import imports_libraries_first, names_compiler
from envaudit.settings import STAGE_NEXT, read

REFERENCE_CACHE = "reference-cache"

# Statuses that do not fail an audit: the solution was not meant for this device.
NOT_FAILURES = {"PASSED", "UNSUPPORTED_DEVICE"}

STAGE_SWITCH = STAGE_NEXT.name
"""How many jobs ahead an audit starts workers on a GPU (the runtime's stage_ahead when unset);
0 starts each job's worker only after the previous job has sent its last line."""
LIBRARY_STAGE_AHEAD = 2
"""The least an audit stages ahead when one of its solutions imports a library before its own
code (imports_libraries_first): such a worker takes seconds to reach its gate, longer than
many jobs. On the H200 machine (s52, docs/lab/audit-throughput.md) two ahead took the cached audit
of the four FA4 `dev` solutions from 16.0 s to 13.9 s; on the six `dev` solutions that import none,
two ahead and one ahead took the same time (s53-s54). It was withdrawn once (156f4a1) for an
FA4 line that read 6% slow at two ahead; that line read both ways with nothing beside it, the
power controller acting or not within its measurement (s56-s59), and the warm-up now waits
for the controller."""

BuildHook = Callable[[str], str | None]
"""Called with an env name before its first job; returns why its image cannot be had, or None."""


class JobProgress(Protocol):
    """What an audit tells its caller as it goes (the terminal shows a count, an ETA and each
    job's outcome from it); called from the device slots' threads."""

    def planned(self, jobs: int) -> None:
        """The number of jobs the audit will run (once, before the first)."""

    def started(self, name: str, where: str) -> None:
        """A job of solution `name` begins on `where` (a GPU's UUID, or `cpu`)."""

    def ended(self, name: str, where: str, statuses: Counter[str], seconds: float) -> None:
        """That job ended: the statuses of the lines it wrote (none when it wrote none)."""


@dataclass
class AuditPlan:
    solutions: list[str]
    devices: list[tuple[str | None, str | None]]
    """(gpu uuid, device) pairs: exactly one of the two is set."""
    out: Path
    runtime: str
    options: RunOptions = field(default_factory=RunOptions)
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    suite: str | None = None
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    """What every job checks and how it times (graph timing is the audit's own: evaluation_on)."""
    each_gpu: bool = False
    """Run every solution on every GPU named (to compare cards), not once per GPU model."""
    cpu_jobs: int = 1
    """CPU audits: jobs at once (their timings then share the CPU)."""

    _parsed: dict[str, tuple[Path, Solution]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _index: SolutionIndex | None = field(default=None, init=False, repr=False, compare=False)
    """The solutions folders, indexed once for the plan's lookups (again on a name it lacks)."""
    _runtime: Runtime | None = field(default=None, init=False, repr=False, compare=False)

    def made_runtime(self) -> Runtime:
        """The audit's runtime, made and checked against --env and --over once (RunRequestError,
        exit 2, when it refuses them): every step of the audit asks this one object."""
        if self._runtime is None:
            self._runtime = get_runtime(
                self.runtime, self.options.env, self.options.over, self.options.substitute
            )
        return self._runtime

    def suite_for(self, gpu: bool) -> str:
        """The suite asked for, else dev on a GPU and smoke on the CPU."""
        return self.suite or ("dev" if gpu else "smoke")

    def evaluation_on(self, gpu: bool) -> EvalOptions:
        """The evaluation options of a job on a GPU (gpu) or the CPU: an audit times the call
        captured in a CUDA graph too wherever there is one, on a GPU."""
        return replace(self.evaluation, graph_timing=gpu)

    def solution(self, name: str) -> tuple[Path, Solution]:
        """find_solution's answer for `name`, parsed once per audit: the plan's checks, its
        order and its staging all ask for it (each job's plan still reads its own copy)."""
        if name not in self._parsed:
            roots = solution_roots(self.solutions_root, self.data_root)
            if self._index is None or name not in self._index.files:
                self._index = index_solutions(roots)  # a name it missed may have come since
            index = self._index
            self._parsed[name] = find_solution(name, self.solutions_root, self.data_root, index)
        return self._parsed[name]


@dataclass
class AuditResult:
    report: Path
    statuses: Counter[str] = field(default_factory=Counter)
    """Over the line that counts for each key (envaudit.schema.results)."""
    superseded: int = 0
    """Lines of a key that has a newer line in the report: not counted."""
    errors: list[str] = field(default_factory=list)
    fatal: WriteFailed | None = None
    """The report could not be written: the audit stops and ends with this error (exit 2)."""

    @property
    def failed(self) -> bool:
        return bool(self.errors) or any(s not in NOT_FAILURES for s in self.statuses)


def all_solutions(solutions_root: Path, data_root: Path | None = None) -> list[str]:
    """Every solution under --solutions-root and the data root's solutions/, in either layout
    (dataset/solutions.py); EnvauditError (exit 2) for a name two files hold."""
    return index_solutions(solution_roots(solutions_root, data_root)).names()


def solutions_of(definition: str, solutions_root: Path, data_root: Path) -> list[str]:
    """Every solution of `definition` FlashInfer-Bench would load from the data root, and
    those of --solutions-root; EnvauditError (exit 2) when there is none."""
    try:
        known = load_traceset(data_root).definitions
    except DatasetRootError as exc:
        raise EnvauditError(
            str(exc), hint="pass --data-root pointing at a folder holding definitions/"
        ) from None
    if definition not in known:
        raise EnvauditError(
            f"--definition {shown(definition)}: not a definition under {data_root}",
            hint=f"definitions: {', '.join(sorted(known)[:12])}",
        )
    index = index_solutions(solution_roots(solutions_root, data_root))
    names = index.of_definition(definition)
    if not names:
        raise EnvauditError(
            f"--definition {shown(definition)}: no solution of it under {index.where()}",
            hint="pass --solutions-root pointing at the folder of solutions (our"
            " <name>/solution.json or FlashInfer-Bench's <author>/<op_type>/<definition>/"
            "<name>.json), or a --data-root whose solutions/ holds them",
        )
    return names


def envs_of(plan: AuditPlan) -> dict[str, str | None]:
    """solution -> the env it will run in (the override, else its declared env, else the one
    the data's envs.toml assigns it)."""
    found = {}
    for name in plan.solutions:
        _, solution = plan.solution(name)
        assigned = assigned_env(solution, plan.data_root)
        found[name] = plan.options.env or solution.env or (assigned.env if assigned else None)
    return found


def check_dependencies_of(plan: AuditPlan) -> None:
    """DependencyError (exit 2) before any job: a solution whose env lacks what it names."""
    if not plan.made_runtime().takes_env:
        return
    for name, env in envs_of(plan).items():
        _, solution = plan.solution(name)
        if env:
            spec = solution.spec
            locks = plan.options.locks_dir
            tools = BuildTools(spec.language, spec.binding or "")
            check_dependencies(name, spec.dependencies, env, locks, tools)


def check_audit(plan: AuditPlan) -> None:
    """Everything that would fail every job, refused before the first one (exit 2)."""
    plan.made_runtime().require()
    if not plan.solutions:
        raise EnvauditError(
            f"no solutions to audit under {plan.solutions_root}/ (nor the data root's solutions/)",
            hint="pass --solutions-root pointing at the folder of solutions, or --solution NAME",
        )
    for gpu, device in plan.devices:
        device_of(RunRequest(solution="", gpu=gpu, device=device))
        if gpu is not None:
            require_gpu(gpu)
    check_output(plan.out, "--out", folder=True)
    check_report(plan.out / "results.jsonl", "--out")
    check_output(plan.out / REFERENCE_CACHE, "--out", folder=True)
    check_cache()
    server_idle_s()  # ENVAUDIT_SERVER_IDLE_S is a number of seconds
    check_evaluation(plan.evaluation)
    stage_ahead(plan.made_runtime())
    try:
        ts = load_traceset(plan.data_root)
    except DatasetRootError as exc:
        raise EnvauditError(
            str(exc), hint="pass --data-root pointing at a folder holding definitions/"
        ) from None
    if plan.suite is not None and plan.suite != "all" and plan.suite not in ts.suites:
        raise EnvauditError(
            f"no suite {shown(plan.suite)} in {plan.data_root / 'suites'}",
            hint=f"known suites: {', '.join(sorted({*ts.suites, 'all'}))}",
        )
    check_dependencies_of(plan)  # and every named solution exists


def warm_workers(plan: AuditPlan) -> None:
    """Have the runtime start what each device's first worker waits for (the host runtime's
    fork server) while the audit checks and plans its jobs and prepares the first ones. Asked
    before the checks (the GPU's, the dataset's: 0.14 s of a cached dev audit on the H200
    machine, s41), so what they refuse is left to them: a runtime or device they would refuse
    warms nothing, and a server started for an audit they refuse ends with the command."""
    try:
        runtime = plan.made_runtime()
        envs = [device_of(RunRequest(solution="", gpu=g, device=d))[2] for g, d in plan.devices]
        for env in envs:
            runtime.warm(env)
    except EnvauditError:
        return


def _request(
    plan: AuditPlan, name: str, gpu: str | None, device: str | None, report: Path
) -> RunRequest:
    return RunRequest(
        solution=name,
        data_root=plan.data_root,
        solutions_root=plan.solutions_root,
        suite=plan.suite_for(gpu is not None),
        gpu=gpu,
        device=device,
        evaluation=plan.evaluation_on(gpu is not None),
        reference_cache=plan.out / REFERENCE_CACHE,
        report=report,
    )


def device_pools(plan: AuditPlan) -> list[list[tuple[str | None, str | None]]]:
    """Slots that share one queue of jobs: the GPUs of one model (any of them can stand for the
    model), each GPU alone with `each_gpu`, and `cpu_jobs` slots for the CPU."""
    names = {g.uuid: g.name for g in gpus() or []}
    pools: dict[str, list[tuple[str | None, str | None]]] = {}
    for gpu, device in plan.devices:
        if gpu is None:
            pools[f"device {device}"] = [(None, device)] * max(1, plan.cpu_jobs)
        else:
            key = gpu if plan.each_gpu else names.get(gpu, gpu)
            pools.setdefault(key, []).append((gpu, None))
    return list(pools.values())


def longest_first(plan: AuditPlan, names: list[str], report: Path) -> list[str]:
    """Solutions by expected duration, longest first: the wall time their lines took in this
    report before (a re-audit), else their number of workloads in the suite."""
    spent: dict[str, float] = {}
    if report.is_file():
        for line in kept_result_lines(report).values():
            if line.wall_s is not None:
                spent[line.solution] = spent.get(line.solution, 0.0) + float(line.wall_s)
    ts = load_traceset(plan.data_root)
    suite = plan.suite_for(any(g for g, _ in plan.devices))

    def expected(name: str) -> float:
        return spent[name] if name in spent else float(len(_selected(plan, ts, name, suite)))

    return sorted(names, key=lambda name: (-expected(name), name))


def solution_imports_libraries_first(solution_file: Path, solution: Solution) -> bool:
    """imports_libraries_first of a solution as find_solution returns it."""
    sources = [source.model_dump() for source in solution.sources]
    return imports_libraries_first(solution.spec.entry_point, sources, solution_file.parent)


def place_compiler_jobs(plan: AuditPlan, names: list[str], depth: int) -> list[str]:
    """The jobs whose solutions name the compiler (envaudit.schema.sources), placed where their
    long start costs least; the other jobs keep their order, and so do these among themselves.

    On the forked runtimes such a job waits for the fork server's preload of the compiler,
    which is made beside the first jobs: run first, it would wait for all of it while the other
    jobs could have run, so these go last. On the other runtimes each worker imports the
    compiler itself before its gate, and a job staged ahead (`depth` jobs are: stage_ahead) does
    it beside the job before it: these go right after the first job, so their start overlaps
    the first job's start and run. Placed first, their start would have nothing to overlap;
    placed later, they are staged only once the jobs before them begin, and the jobs before
    them are often shorter than that start (s30 in docs/lab/audit-throughput.md: 8 s of gate waits
    after FlexAttention's, fourth of six). With nothing staged (`depth` 0) the order stays."""
    forks = plan.made_runtime().forks_workers
    if not forks and depth == 0:
        return names
    compilers = {n for n in names if names_compiler(plan.solution(n)[0].parent)}
    others = [n for n in names if n not in compilers]
    placed = [n for n in names if n in compilers]
    if forks:
        return others + placed
    return others[:1] + placed + others[1:]


def stage_ahead(runtime: Runtime, libraries_first: bool = False) -> int:
    """How many jobs' workers to start ahead on a GPU: ENVAUDIT_STAGE_NEXT, else the runtime's
    stage_ahead (runtime/base.py), at least LIBRARY_STAGE_AHEAD when `libraries_first` (a
    solution of the audit imports a library before its own code)."""
    chosen = read(STAGE_NEXT)
    if chosen is None:
        depth = runtime.stage_ahead
        return max(depth, LIBRARY_STAGE_AHEAD) if libraries_first else depth
    return chosen


def run_audit(
    plan: AuditPlan,
    progress: JobProgress | None = None,
    prepare_env: BuildHook | None = None,
) -> AuditResult:
    """Every solution once per pool of devices (GPUs of one model; each GPU its own pool with
    `each_gpu`), the longest jobs first (those that need the compiler where their start costs
    least: place_compiler_jobs), one job at a time per device and all devices at once.
    Environments are made first, one after the other, so no two jobs build one image."""
    mark("audit_start")
    warm_workers(plan)
    check_audit(plan)
    report = plan.out / "results.jsonl"
    result = AuditResult(report)
    ready = longest_first(plan, _ready(plan, prepare_env, result), report)
    depth = stage_ahead(
        plan.made_runtime(),
        any(solution_imports_libraries_first(*plan.solution(n)) for n in ready),
    )
    ordered = place_compiler_jobs(plan, ready, depth)
    mark("jobs_ready")
    guard = threading.Lock()
    runtime = plan.made_runtime()
    threads = []
    pools = device_pools(plan)
    if progress is not None:
        progress.planned(len(ordered) * len(pools))
    for slots in pools:
        pool: queue.SimpleQueue[str] = queue.SimpleQueue()
        for name in ordered:
            pool.put(name)
        for gpu, device in slots:
            slot = DeviceSlot(plan, runtime, report, result, guard, depth, progress, gpu, device)
            threads.append(threading.Thread(target=slot.work, args=(pool,)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if result.fatal is not None:
        raise result.fatal  # the report's lines are not this run's: count none of them
    counted = _counted(result)
    mark("audit_end")
    return counted


@dataclass
class DeviceSlot:
    """One device's turn through its pool's queue: one job at a time; on a GPU, the next
    `depth` jobs staged ahead (their first workers started, gated) and the GPU handed from one
    job's worker to the next (supervision/supervisor.py, Handoff)."""

    plan: AuditPlan
    runtime: Runtime
    report: Path
    result: AuditResult
    guard: threading.Lock
    depth: int
    progress: JobProgress | None
    gpu: str | None
    device: str | None

    def work(self, pool: queue.SimpleQueue[str]) -> None:
        handoff = Handoff() if self.gpu is not None else None
        ahead = ThreadPoolExecutor(1, thread_name_prefix="envaudit-stage")
        pending: deque[tuple[str, Future[PreparedJob] | None]] = deque()
        try:
            while True:
                if not pending:
                    taken = _take(pool)
                    if taken is None:
                        break
                    pending.append((taken, None))
                name, current = pending.popleft()
                where = self.gpu or self.device or CPU
                began, offset = time.monotonic(), _size(self.report)
                if self.progress:
                    self.progress.started(name, where)
                mark("job_begin", name)
                if handoff is not None:
                    handoff.launched.clear()
                    self._stage_following(pool, pending, ahead, handoff)
                self._run(name, current, pool, handoff)
                mark("job_end", name)
                if self.progress:
                    statuses = _statuses_since(self.report, offset, name, where)
                    self.progress.ended(name, where, statuses, time.monotonic() - began)
        finally:
            for _, staged in pending:
                if staged is not None and not staged.cancel():
                    staged.add_done_callback(_discard_staged)
            if handoff is not None:
                handoff.launched.set()
            ahead.shutdown(wait=True)
            if handoff is not None:
                handoff.wait()  # the GPU's last worker has gone before the audit ends

    def _stage_following(
        self,
        pool: queue.SimpleQueue[str],
        pending: deque[tuple[str, Future[PreparedJob] | None]],
        ahead: ThreadPoolExecutor,
        handoff: Handoff,
    ) -> None:
        """Take later jobs from the pool early, only to stage them (on a GPU: a CPU slot, with
        --cpu-jobs, takes its next job only when it is free)."""
        while len(pending) < self.depth:
            following = _take(pool)
            if following is None:
                break
            pending.append((following, ahead.submit(self._start_ahead, following, handoff)))

    def _start_ahead(self, name: str, handoff: Handoff) -> PreparedJob:
        handoff.launched.wait()  # the current job's worker has started
        mark("job_staged", name)
        request = _request(self.plan, name, self.gpu, self.device, self.report)
        job = plan_run(request, self.runtime)
        return stage(prepare(self.runtime, job, self.plan.options), self.plan.options)

    def _run(
        self,
        name: str,
        current: Future[PreparedJob] | None,
        pool: queue.SimpleQueue[str],
        handoff: Handoff | None,
    ) -> None:
        """Supervise the job (staged, or planned now); a write failure ends the audit (the
        pool is drained), any other error is the job's and the audit goes on."""
        plan = self.plan
        try:
            if current is not None:
                supervise(current.result(), plan.options, handoff)
            else:
                request = _request(plan, name, self.gpu, self.device, self.report)
                run_job(request, self.runtime, plan.options, handoff)
        except WriteFailed as exc:
            with self.guard:
                self.result.fatal = self.result.fatal or exc
            _drain(pool)
        except EnvauditError as exc:
            with self.guard:
                self.result.errors.append(f"{name}: {exc.one_line()}")
        finally:
            if handoff is not None:
                handoff.launched.set()  # a job that never started its worker


def _size(report: Path) -> int:
    try:
        return report.stat().st_size
    except FileNotFoundError:
        return 0


def _statuses_since(report: Path, offset: int, solution: str, where: str) -> Counter[str]:
    """The statuses of the lines of `solution` on `where` appended to the report after
    `offset` (other devices' jobs append to it meanwhile: their lines are not counted)."""
    statuses: Counter[str] = Counter()
    try:
        with report.open("rb") as stream:
            stream.seek(offset)
            tail = stream.read()
    except FileNotFoundError:
        return statuses
    for raw in tail.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        mine = isinstance(line, dict) and line.get("solution") == solution
        if mine and line_key(line).device == where:
            statuses[str(line.get("status"))] += 1
    return statuses


def _take(pool: queue.SimpleQueue[str]) -> str | None:
    try:
        return pool.get_nowait()
    except queue.Empty:
        return None


def _drain(pool: queue.SimpleQueue[str]) -> None:
    """Take every job left in the pool: after a report write failed, none may start."""
    while _take(pool) is not None:
        pass


def _discard_staged(staged: Future[PreparedJob]) -> None:
    """A job prepared ahead that will not run (the audit was interrupted): its worker goes."""
    if staged.exception() is None:
        staged.result().discard()


def _ready(plan: AuditPlan, prepare_env: BuildHook | None, result: AuditResult) -> list[str]:
    """Each env made once, in order, before any job; the solutions whose env could be had
    (the others go to result.errors with the reason)."""
    envs = envs_of(plan)
    unavailable = {
        e: prepare_env(e) if prepare_env and e else None for e in dict.fromkeys(envs.values())
    }
    ready = []
    for name in plan.solutions:
        if unavailable[envs[name]]:
            result.errors.append(f"{name}: {unavailable[envs[name]]}")
        else:
            ready.append(name)
    return ready


def _counted(result: AuditResult) -> AuditResult:
    """Statuses over the line that counts per key, and how many lines were superseded."""
    if result.report.is_file():
        kept = kept_result_lines(result.report)
        for line in kept.values():
            result.statuses[line.status] += 1
        lines = sum(1 for _, line in result_lines(result.report) if line)
        result.superseded = lines - len(kept)
    return result


def _selected(plan: AuditPlan, ts: TraceSet, name: str, suite: str) -> list[str]:
    """The workloads of solution `name` in `suite`."""
    _, solution = plan.solution(name)
    return select_workloads(ts, solution.definition, RunRequest(name, suite=suite))


def run_slurm_audit(
    plan: AuditPlan,
    settings: SlurmSettings,
    on_event: Callable[[str], None] | None = None,
    prepare_env: BuildHook | None = None,
) -> AuditResult:
    """The audit as one Slurm job array (runtime/scheduling/slurm.py): one task per solution, or per
    `settings.shard` of its workloads; with `--resume`, only tasks whose workloads lack a line.
    The tasks' lines are merged into OUT/results.jsonl when every task has ended; the array's
    files stay in OUT/slurm/<start time>-<pid>/."""
    check_audit(plan)
    check_slurm()
    report = plan.out / "results.jsonl"
    result = AuditResult(report)
    gpu = any(g for g, _ in plan.devices)
    suite = plan.suite_for(gpu)
    done = _recorded(report) if plan.options.resume else set()
    where = _where_lines_go(plan) if plan.options.resume else {}
    ts = load_traceset(plan.data_root)
    tasks = []
    for name in longest_first(plan, _ready(plan, prepare_env, result), report):
        env, closure = where.get(name, ("", ""))
        todo = [w for w in _selected(plan, ts, name, suite) if (name, w, env, closure) not in done]
        size = settings.shard or len(todo) or 1
        for start in range(0, len(todo), size):
            shard = tuple(todo[start : start + size])
            tasks.append(Task(name, shard, _task_args(plan, name, shard, gpu)))
    folder = plan.out / "slurm" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    if tasks:
        run = run_tasks(tasks, folder, settings, gpu, on_event)
        merge_task_reports(run, folder, report)
        (folder / "array.json").write_text(array_record(run) + "\n")
        for index in run.gave_up:
            task = run.tasks[index]
            result.errors.append(
                f"{task.solution}: task {index} failed {run.attempts[index]} time(s)"
                f" (Slurm output: {folder / f'task-{index}.out'})"
            )
    return _counted(result)


def _recorded(report: Path) -> set[tuple[str, str, str, str]]:
    """(solution, workload, env, closure hash) of the lines that count: --resume under Slurm
    skips by the line's identity (schema.results.line_identity), less the device, which Slurm
    picks only when a task starts (any of the audit's devices counts as done)."""
    if not report.is_file():
        return set()
    return {key[:4] for key in kept_result_lines(report)}


def _where_lines_go(plan: AuditPlan) -> dict[str, tuple[str, str]]:
    """solution -> (env, closure hash) its lines will record: the env it runs in (envs_of) and
    that env's lock's closure, as every runtime records them (runtime.jobs.RunContext)."""
    found = {}
    for name, env in envs_of(plan).items():
        closure = ""
        if env:
            with contextlib.suppress(EnvauditError, OSError):
                closure = load_lock(plan.options.locks_dir / env).closure_hash
        found[name] = (str(env or ""), closure)
    return found


def _task_args(
    plan: AuditPlan, name: str, workloads: tuple[str, ...], gpu: bool
) -> tuple[str, ...]:
    """`envaudit run` arguments of one task (its report and, on a GPU, --gpu come later)."""
    args = ["--solution", name, "--runtime", plan.runtime]
    args += ["--data-root", str(plan.data_root.resolve())]
    args += ["--solutions-root", str(plan.solutions_root.resolve())]
    args += ["--reference-cache", str((plan.out / REFERENCE_CACHE).resolve())]
    args += ["--timeout", str(plan.options.workload_timeout_s)]
    for workload in workloads:
        args += ["--workload", workload]
    if not gpu:
        args += ["--device", "cpu"]
    if plan.options.env:
        args += ["--env", plan.options.env]
    if plan.options.over:
        args += ["--over", plan.options.over]
    if plan.options.substitute:
        args += ["--substitute-base", plan.options.substitute]
    args += plan.evaluation_on(gpu).cli_args()
    return tuple(args)
