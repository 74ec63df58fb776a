"""Run a recorded result line again, in exactly what it records: its lock (by closure hash, from
git history when the lock has moved on), its solution revision (by source hash, the same way),
its workload, on a GPU of the model it ran on.

Everything that would make the attempt meaningless is checked first and refused with the
reason (exit 2): a closure or a solution revision no commit holds, a workload the dataset no
longer has, no GPU of the recorded model here, another driver (unless allowed). A line without
a closure (the host interpreter's, or a FlashInfer-Bench trace's) runs in the solution's
declared env instead, and the plan says so.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from envaudit.commands.environments import MakeEnv
from envaudit.dataset.solutions import (
    OURS,
    SolutionFile,
    SolutionIndexError,
    index_solutions,
    solution_roots,
)
from envaudit.dataset.traceset import DatasetRootError, load_traceset
from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.lock.history import (
    LockNotFound,
    env_folder,
    find_lock,
    git_bytes,
    git_export,
    git_root,
    git_show,
    run_git,
)
from envaudit.report.side_by_side import (
    RunComparison,
    as_json,
    compare_runs,
    read_recorded,
    render_comparison,
    reproduced,
)
from envaudit.runtime.base import RunOptions, Runtime
from envaudit.runtime.devices import gpus
from envaudit.runtime.jobs import RunRequest
from envaudit.runtime.registry import RUNTIME_NAMES, get_runtime
from envaudit.runtime.scheduling.steps import run_job
from envaudit.schema.models import solution_revision
from envaudit.schema.names import name_problem, shown
from envaudit.schema.options import EvalOptions
from envaudit.schema.reading import load_json, loads_json
from envaudit.schema.result_line import ResultLine, Timing, result_lines


class CannotReproduce(EnvauditError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, EXIT_USAGE, hint=hint)


@dataclass(frozen=True)
class Reproduction:
    """What will run, and from where each part comes."""

    solution: str
    workload: str
    data_root: Path
    env: str | None
    locks_dir: Path
    solutions_root: Path
    gpu: str | None
    device: str | None
    evaluation: EvalOptions
    """Graph timing as the line had it, under the budget it was measured with (recorded_budget)."""
    notes: list[str] = field(default_factory=list)
    solution_file: Path | None = None
    """The file of the recorded revision (either layout), run as it is: a revision exported
    from git history is never confused with the current file of the same name."""
    substitute: str | None = None
    """The declared substitute base whose closure the line ran in (its closure is that
    substitute's lock): the rerun asks for it by name, as the recorded run did."""


def recorded_budget(timing: Timing | None) -> float | None:
    """The measured-time budget a line's eager timing ran under, to run it again under the same
    (None for a line from before budgets were recorded: the harness's own, then)."""
    eager = timing.eager if timing is not None else None
    budget = eager.budget_ms if eager is not None else None
    return None if budget is None else float(budget)


def plan_reproduction(
    line: ResultLine,
    data_root: Path,
    solutions_root: Path,
    locks_dir: Path,
    scratch: Path,
    gpu: str | None = None,
    other_driver: bool = False,
) -> Reproduction:
    """The run that repeats `line`, or CannotReproduce saying why there is none."""
    notes: list[str] = []
    solution = line.solution
    problem = name_problem(solution)
    if problem is not None:  # it names the folder read (and exported from git history)
        raise CannotReproduce(f"the line's solution {shown(solution)} is not a name: {problem}")
    workload = line.workload.uuid
    _require_workload(data_root, line, workload)
    found = _solution_file(solution, solutions_root, data_root)
    file, origin = _solution_revision(line, found, scratch / "solutions")
    notes.append(origin)
    env, env_locks, substitute = _environment(line, file, locks_dir, scratch / "locks", notes)
    chosen_gpu, device = _device(line, gpu, other_driver, notes)
    return Reproduction(
        solution=solution,
        workload=workload,
        data_root=data_root,
        env=env,
        locks_dir=env_locks,
        solutions_root=solutions_root,
        solution_file=file,
        substitute=substitute,
        gpu=chosen_gpu,
        device=device,
        evaluation=EvalOptions(
            graph_timing=line.stats("graph") is not None, measure_ms=recorded_budget(line.timing)
        ),
        notes=notes,
    )


def run_reproduction(
    plan: Reproduction, runtime: Runtime, options: RunOptions, report: Path
) -> ResultLine:
    """Run the planned workload once; the new result line."""
    request = RunRequest(
        solution=str(plan.solution_file) if plan.solution_file else plan.solution,
        data_root=plan.data_root,
        solutions_root=plan.solutions_root,
        workloads=[plan.workload],
        gpu=plan.gpu,
        device=plan.device,
        evaluation=plan.evaluation,
        report=report,
    )
    asked = replace(options, env=plan.env, locks_dir=plan.locks_dir, substitute=plan.substitute)
    run_job(request, runtime, asked)
    found = [
        line
        for _, line in result_lines(report)
        if line is not None and line.workload.uuid == plan.workload
    ]
    if not found:
        raise CannotReproduce(f"the run wrote no line for workload {plan.workload} to {report}")
    return found[-1]


def scratch_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="envaudit-reproduce-"))


def _require_workload(data_root: Path, line: ResultLine, workload: str) -> None:
    try:
        known = {w.uuid for w in load_traceset(data_root).workloads}
    except DatasetRootError as exc:
        raise CannotReproduce(str(exc)) from None
    if workload not in known:
        raise CannotReproduce(
            f"workload {workload} of {line.definition} is not in {data_root}",
            hint="point --data-root at the dataset the line was measured on",
        )


def _solution_file(name: str, solutions_root: Path, data_root: Path) -> SolutionFile:
    """The one file holding solution `name`, in our layout or FlashInfer-Bench's, under
    --solutions-root or the data root's solutions/ (as `run` finds it)."""
    try:
        index = index_solutions(solution_roots(solutions_root, data_root))
        found = index.find(name)
    except SolutionIndexError as exc:
        raise CannotReproduce(str(exc), exc.hint) from None
    if found is None:
        raise CannotReproduce(f"solution {shown(name)} is not under {index.where()}")
    return found


def _solution_revision(line: ResultLine, found: SolutionFile, scratch: Path) -> tuple[Path, str]:
    """(the solution file of the recorded revision, where it came from): the current file, else
    the file as a commit of its repository held it, exported under `scratch`. Our layout's
    revision is its folder (solution.json and the sources beside it), FlashInfer-Bench's its
    one file (sources inline)."""
    name, wanted = found.name, line.solution_hash
    if not wanted:
        return found.path, f"solution {name}: the line records no revision; the current one"
    if _revision_of(found.path) == wanted:
        return found.path, f"solution {name}: the current revision ({wanted[:12]})"
    repo = git_root(found.path.parent)
    if repo is not None:
        ours = found.layout == OURS
        kept = (found.path.parent if ours else found.path).resolve().relative_to(repo)
        file_rel = kept / found.path.name if ours else kept
        for commit in _commits_touching(repo, str(kept)):
            if _revision_hash(repo, commit, str(file_rel)) == wanted:
                git_export(commit, str(kept), repo, scratch)
                return (
                    scratch / file_rel,
                    f"solution {name}: revision {wanted[:12]} from commit {commit[:12]}",
                )
    raise CannotReproduce(
        f"solution {name} revision {wanted[:12]} is neither the current one ({found.path}) nor"
        " in any commit of its repository",
        hint="the line was measured with sources this repository never committed",
    )


def _revision_of(file: Path) -> str | None:
    try:
        spec = load_json(file)
        return solution_revision(spec, lambda rel: (file.parent / rel).read_bytes())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _commits_touching(repo: Path, rel: str) -> list[str]:
    done = run_git("log", "--all", "--format=%H", "--", rel, cwd=repo)
    return done.stdout.split() if done.returncode == 0 else []


def _revision_hash(repo: Path, commit: str, file_rel: str) -> str | None:
    """The revision of the solution file `file_rel` as `commit` held it (its sources beside it
    read from the same commit)."""
    text = git_show(commit, file_rel, repo, missing_ok=True)
    folder = Path(file_rel).parent
    try:
        spec = loads_json(text, f"{commit}:{file_rel}")
        return solution_revision(spec, lambda path: git_bytes(commit, str(folder / path), repo))
    except (ValueError, KeyError, TypeError, LockNotFound):
        return None


def _environment(
    line: ResultLine,
    solution_file: Path,
    locks_dir: Path,
    scratch: Path,
    notes: list[str],
) -> tuple[str | None, Path, str | None]:
    """(env to run in, locks folder holding it, substitute base): the recorded closure's lock,
    from history when it has moved on (the env's whole folder, so a substitute's closure comes
    with the env.toml that declares it); without a closure, the solution's declared env."""
    closure = line.closure_hash
    if not closure:
        declared = _declared_env(solution_file)
        notes.append(
            "env: the line records no closure (the host interpreter's, or a FlashInfer-Bench"
            f" trace's): running in the solution's declared env {declared} instead"
        )
        return declared, locks_dir, None
    try:
        found = find_lock(str(closure), locks_dir)
    except LockNotFound as exc:
        raise CannotReproduce(str(exc), exc.hint) from None
    env = found.lock.env
    substitute = found.lock.substitute.name if found.lock.substitute is not None else None
    over = f" over the substitute base {substitute}" if substitute else ""
    if ":" not in found.origin:
        notes.append(f"env: {env}{over}, closure {closure[:12]}, the current lock ({found.origin})")
        return env, locks_dir, substitute
    commit, path = found.origin.split(":", 1)
    repo = git_root(locks_dir)
    assert repo is not None  # history was searched in it
    folder = env_folder(Path(path))
    git_export(commit, str(folder), repo, scratch)
    notes.append(f"env: {env}{over}, closure {closure[:12]}, its lock from commit {commit}")
    return env, scratch / folder.parent, substitute


def _declared_env(solution_file: Path) -> str | None:
    try:
        env = load_json(solution_file).get("env")
    except (OSError, ValueError, AttributeError):  # AttributeError: not a JSON object
        return None
    return str(env) if env else None


def _device(
    line: ResultLine, gpu: str | None, other_driver: bool, notes: list[str]
) -> tuple[str | None, str | None]:
    """(GPU UUID, device) of the same model as the line's; CPU lines run on the CPU."""
    recorded = line.environment
    if recorded.device_type == "cpu" or not recorded.gpu_name:
        notes.append("device: the CPU, as recorded")
        return None, "cpu"
    model, driver = recorded.gpu_name, str(recorded.driver or "")
    here = gpus() or []
    same = [g for g in here if g.name == model and (gpu is None or g.uuid == gpu)]
    if not same:
        found = ", ".join(sorted({f"{g.name} ({g.uuid[:12]})" for g in here})) or "no NVIDIA GPU"
        raise CannotReproduce(
            f"the line ran on an {model}; this machine has {found}"
            + (f" (--gpu {gpu})" if gpu else ""),
            hint="a timing compares only on the GPU model it was measured on",
        )
    chosen = same[0]
    if driver and chosen.driver != driver:
        if not other_driver:
            raise CannotReproduce(
                f"the line ran with driver {driver}; {chosen.uuid[:12]} has {chosen.driver}",
                hint="--other-driver runs it anyway (the verdict then compares across drivers)",
            )
        notes.append(f"device: driver {chosen.driver} here, {driver} then (--other-driver)")
    notes.append(f"device: {chosen.name} {chosen.uuid} (recorded: {recorded.gpu_uuid})")
    return chosen.uuid, None


@dataclass(frozen=True)
class ReproduceRequest:
    """What `envaudit reproduce` was asked, beside the recorded line."""

    runtime: str | None
    over: str | None
    workload_timeout_s: float
    data_root: Path
    solutions_root: Path
    locks_dir: Path
    gpu: str | None
    other_driver: bool
    out: Path


def reproduce_recorded(
    recorded: ResultLine, ask: ReproduceRequest, make_env: MakeEnv
) -> tuple[Reproduction, ResultLine]:
    """The plan and the new line of a recorded line run again: in the runtime asked for, else
    the one it ran in (the host runtime for a trace), over the stack it ran over."""
    scratch = scratch_folder()
    try:
        return _reproduce_in(recorded, ask, make_env, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the revisions and locks it rebuilt


def _reproduce_in(
    recorded: ResultLine, ask: ReproduceRequest, make_env: MakeEnv, scratch: Path
) -> tuple[Reproduction, ResultLine]:
    ran_in = str(recorded.context.runtime or "")  # a trace's is "flashinfer-bench"
    chosen = ask.runtime or (ran_in if ran_in in RUNTIME_NAMES else "host")
    plan = plan_reproduction(
        recorded,
        ask.data_root,
        ask.solutions_root,
        ask.locks_dir,
        scratch,
        ask.gpu,
        ask.other_driver,
    )
    if chosen == "host":  # this interpreter as it is: the lock is checked, not made
        notes = [*plan.notes, "runtime: host (this interpreter)"]
        plan = replace(plan, env=None, substitute=None, notes=notes)
    env_check = recorded.context.env_check
    recorded_over = env_check.overlay_on if env_check else None
    over = ask.over or (recorded_over if get_runtime(chosen).takes_over else None)
    options = RunOptions(
        over=over,
        workload_timeout_s=ask.workload_timeout_s,
        locks_dir=plan.locks_dir,
        substitute=plan.substitute,
    )
    # a substitute's closure is had only in a container runtime: the local one refuses it
    runtime = get_runtime(chosen, plan.env, over, plan.substitute)
    if plan.env:
        make_env(runtime, replace(options, env=plan.env), plan.env)
    ask.out.mkdir(parents=True, exist_ok=True)
    return plan, run_reproduction(plan, runtime, options, ask.out / "reproduce.jsonl")


@dataclass(frozen=True)
class RecordedLine:
    """Which recorded line `envaudit reproduce` runs again: FILE:N, or a file and the
    selectors that pick its newest line of that solution and workload (uuid or label)."""

    spec: str
    solution: str | None = None
    workload: str | None = None


@dataclass(frozen=True)
class ReproduceOutcome:
    """The recorded line beside the new one (report.side_by_side's comparison) and the notes
    that say where each part of the rerun came from; it renders as text or JSON and gives the
    exit code (0 reproduced within noise, 1 not)."""

    comparison: RunComparison
    notes: list[str]

    @property
    def exit_code(self) -> int:
        return reproduced(self.comparison)

    def text(self) -> str:
        return render_comparison(self.comparison, self.notes)

    def json_text(self) -> str:
        return as_json(self.comparison, self.notes)


def reproduce_line(
    which: RecordedLine, ask: ReproduceRequest, make_env: MakeEnv
) -> ReproduceOutcome:
    """`envaudit reproduce` whole: the line read, run again in what it records, compared."""
    recorded, where = read_recorded(which.spec, which.solution, which.workload)
    plan, now = reproduce_recorded(recorded, ask, make_env)
    return ReproduceOutcome(compare_runs(recorded, now), [f"recorded: {where}", *plan.notes])
