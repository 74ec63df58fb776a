"""`envaudit bisect-env A B --solution S`: which change between two locks flips a solution's
result, found the way `git bisect` finds a commit.

Both ends run first and must disagree on the criterion (`status`: the per-workload statuses
differ; `time`: B's time ratio to A is beyond the threshold and its 95% interval excludes 1).
Then the changes between them (lock/bisect.py) are applied in halves (lock/bisect_search.py):
each step is a real lock resolved offline from the store (lock/bisect_locks.py), made ready in
the chosen runtime (a local env, an image), run through the same `run` path as `envaudit run`,
and judged like A or like B. A step's lines are kept in the cache under a key of its closure
hash, the solution's revision, the workloads, the device, the runtime and the evaluation
options, so a second bisection of the same ends runs nothing. With the Slurm executor the
steps of one level run as one job array.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from envaudit.commands.environments import MakeEnv
from envaudit.commands.run import run_solution
from envaudit.errors import EXIT_FAILED, EXIT_OK
from envaudit.lock.bisect import CannotBisect, Change, Ends, Folded, ends_of, fold
from envaudit.lock.bisect_locks import Place, end_place, intermediate, work_folder
from envaudit.lock.bisect_search import search
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_lock
from envaudit.lock.history import FoundLock, find_lock
from envaudit.lock.store import Store
from envaudit.report.intervals import geomean_of, speedup_of
from envaudit.runtime.base import RunOptions
from envaudit.runtime.jobs import RunRequest, find_solution
from envaudit.runtime.registry import get_runtime
from envaudit.runtime.scheduling.slurm import Task, run_tasks, task_report
from envaudit.schema.models import solution_source_hash
from envaudit.schema.options import EvalOptions
from envaudit.schema.result_line import ResultLine, result_lines
from envaudit.schema.slurm import SlurmSettings
from envaudit.schema.writes import replace_text
from envaudit.settings import cache_root

Criterion = Literal["status", "time"]
Echo = Callable[[str], None]


@dataclass(frozen=True)
class BisectRequest:
    good: str
    bad: str
    solution: str
    workloads: tuple[str, ...] = ()
    suite: str | None = None
    runtime: str = "local"
    gpu: str | None = None
    device: str | None = None
    on: Criterion = "status"
    threshold_pct: float = 0.0
    locks_dir: Path = Path("locks")
    data_root: Path = Path("workloads")
    solutions_root: Path = Path("solutions")
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    workload_timeout_s: float = 300.0
    slurm: SlurmSettings | None = None
    """Run each level's steps as one Slurm job array (None: here, one after another)."""
    width: int = 1
    """Steps per level (one halves the interval; more split it into width + 1 parts)."""
    out: Path = Path("results/bisect")


@dataclass
class Step:
    """One judged closure: an end or an intermediate."""

    label: str
    env: str
    closure_hash: str
    applied: tuple[str, ...]
    forced: Mapping[str, str]
    report: Path
    cached: bool
    lines: list[ResultLine]
    like_b: bool | None = None
    ratio: float | None = None
    interval: tuple[float, float] | None = None

    @property
    def statuses(self) -> dict[str, str]:
        return {line.workload.uuid: line.status for line in self.lines}

    def status_text(self) -> str:
        counts = Counter(self.statuses.values())
        return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no lines"


@dataclass
class BisectOutcome:
    ends: Ends
    request: BisectRequest
    steps: list[Step]
    culprits: tuple[str, ...]
    group: Folded
    exit_code: int


def bisect_envs(request: BisectRequest, make_env: MakeEnv, echo: Echo) -> BisectOutcome:
    """Run both ends, then the search; the outcome (exit 0: one group flips the criterion,
    1: it takes several together). CannotBisect (exit 2) when it cannot be attempted."""
    if request.on == "time" and request.evaluation.validation_only:
        raise CannotBisect("--on time needs timings; leave out --validation-only")
    revision = _solution_revision(request)  # an unknown solution stops it before any work
    ends = ends_of(
        find_lock(request.good, request.locks_dir), find_lock(request.bad, request.locks_dir)
    )
    config = FetchConfig.from_environment()
    store = Store(config.store)
    _fetch_ends(ends, config)
    work = work_folder(ends)
    place_a = end_place(ends.a, request.locks_dir, work, "a")
    place_b = end_place(ends.b, request.locks_dir, work, "b")
    runner = _Runner(request, ends, config, make_env, echo, work, revision)
    step_a, step_b = runner.level(
        [
            (place_a, "A", Folded(frozenset())),
            (place_b, "B", Folded(frozenset(c.key for c in ends.changes))),
        ]
    )
    judge = _Criterion(request, step_a)
    judge.flips(step_a, ends)  # its own ratio (1.0), and a check that it wrote lines
    step_a.like_b, step_b.like_b = False, judge.flips(step_b, ends)
    if not step_b.like_b:
        raise agree_on_status(step_a, step_b, ends)
    steps = [step_a, step_b]
    keys = [c.key for c in ends.changes]
    python = ends.a.lock.python

    def judge_level(sets: Sequence[frozenset[int]]) -> list[bool]:
        folded = [fold(ends, [keys[i] for i in s], store, python) for s in sets]
        todo = []
        for f in folded:
            if f.applied == frozenset(keys):
                todo.append((place_b, "B", f))
            elif not f.applied:
                todo.append((place_a, "A", f))
            else:
                todo.append((intermediate(ends, f, place_a, store, work), "", f))
        found = runner.level(todo)
        for step in found:
            step.like_b = judge.flips(step, ends)
            step.label = f"step {len(steps) - 1}"
            steps.append(step)
        return [bool(s.like_b) for s in found]

    echo(f"bisect-env: {len(keys)} change(s) between {ends.describe('a')} and {ends.describe('b')}")
    result = search(len(keys), judge_level, request.width)
    culprits = tuple(keys[i] for i in result.culprits)

    def judge_keys(key_sets: Sequence[frozenset[str]]) -> list[bool]:
        return judge_level([frozenset(keys.index(k) for k in s) for s in key_sets])

    culprits = narrowed(culprits, keys, lambda asked: fold(ends, asked, store, python), judge_keys)
    group = fold(ends, culprits, store, python)
    outcome = BisectOutcome(
        ends, request, steps, culprits, group, EXIT_OK if len(culprits) == 1 else EXIT_FAILED
    )
    write_outcome(outcome)
    return outcome


def narrowed(
    culprits: tuple[str, ...],
    keys: Sequence[str],
    folder: Callable[[Sequence[str]], Folded],
    judge: Callable[[Sequence[frozenset[str]]], list[bool]],
    width: int = 1,
) -> tuple[str, ...]:
    """A single culprit's group holds the partners its new version requires; the flip may come
    from one of them alone (flashinfer-python 0.7.2 brings einops, and a solution that imports
    einops flips with einops alone). While the partners can move without the culprit and,
    together, flip the criterion, the same search runs over them; the answer is the smallest
    group found this way. A culprit whose partners do not flip without it stays."""
    while len(culprits) == 1:
        group = folder(culprits)
        partners = [k for k in keys if k in group.applied and k not in culprits]
        alone = folder(partners) if partners else None
        if alone is None or culprits[0] in alone.applied or not judge([frozenset(partners)])[0]:
            return culprits
        found = search(len(partners), _over(partners, judge), width)
        smaller = tuple(partners[i] for i in found.culprits)
        if len(folder(smaller).applied) >= len(group.applied):
            return culprits
        culprits = smaller
    return culprits


def _over(
    names: Sequence[str], judge: Callable[[Sequence[frozenset[str]]], list[bool]]
) -> Callable[[Sequence[frozenset[int]]], list[bool]]:
    """The judge of sets of change names, as a judge of sets of their positions in `names`."""
    return lambda sets: judge([frozenset(names[i] for i in s) for s in sets])


def _fetch_ends(ends: Ends, config: FetchConfig) -> None:
    """Every artifact of both ends in the store: the steps are resolved and built from it."""
    sides: tuple[tuple[FoundLock, Literal["a", "b"]], ...] = ((ends.a, "a"), (ends.b, "b"))
    for found, which in sides:
        report = fetch_lock(found.lock, config)
        if not report.complete:
            listed = "; ".join(report.missing[:3])
            raise CannotBisect(
                f"{len(report.missing)} artifact(s) of {ends.describe(which)} are not in the"
                f" store {config.store} and cannot be fetched: {listed}",
                hint=f"`envaudit fetch {found.lock.env}` says where it looked",
            )


class _Criterion:
    """Like A or like B, against A's step."""

    def __init__(self, request: BisectRequest, step_a: Step) -> None:
        self.on = request.on
        self.margin = request.threshold_pct / 100
        self.a = step_a
        self.direction = 0

    def flips(self, step: Step, ends: Ends) -> bool:
        if not step.lines:
            raise CannotBisect(
                f"{step.label or 'a step'} ({step.env}, closure {step.closure_hash}) wrote no"
                f" result line to {step.report}",
                hint="run the solution in that env with `envaudit run` to see why",
            )
        step.ratio, step.interval = time_ratio(self.a.lines, step.lines)
        if self.on == "status":
            return step.statuses != self.a.statuses
        if self.direction == 0:  # B itself: the direction every step is judged in
            self.direction = self._direction(step, ends)
        if step.ratio is None or step.interval is None:
            return True  # no timing where A had one: not like A
        low, high = step.interval
        return low > 1 + self.margin if self.direction > 0 else high < 1 - self.margin

    def _direction(self, step: Step, ends: Ends) -> int:
        ratio, bounds = step.ratio, step.interval
        beyond = bounds is not None and (bounds[0] > 1 + self.margin or bounds[1] < 1 - self.margin)
        if ratio is None or bounds is None or not beyond:
            shown = "no ratio (untimed lines)" if ratio is None else f"{ratio:.3f}"
            within = f" [{bounds[0]:.3f}, {bounds[1]:.3f}]" if bounds else ""
            raise CannotBisect(
                f"the ends agree on time: B {ends.describe('b')} / A {ends.describe('a')} ="
                f" {shown}{within}, not beyond {self.margin * 100:g}% with its 95% interval",
                hint="nothing to bisect; lower --threshold, or bisect on status",
            )
        return 1 if ratio > 1 else -1


def agree_on_status(step_a: Step, step_b: Step, ends: Ends) -> CannotBisect:
    return CannotBisect(
        f"the ends agree on status: A {ends.describe('a')} gives {step_a.status_text()}, B"
        f" {ends.describe('b')} gives {step_b.status_text()}",
        hint="nothing to bisect; `--on time` compares their timings instead",
    )


def time_ratio(
    a: Sequence[ResultLine], b: Sequence[ResultLine]
) -> tuple[float | None, tuple[float, float] | None]:
    """b's time over a's by the report's one comparison rule (report/intervals.py: each line's
    graph figure where it has one, else its eager one, with the run-to-run floor of its kind):
    the geometric mean over the workloads both timed, with its 95% interval."""
    mine = {line.workload.uuid: line for line in a}
    ratios = []
    for line in b:
        base = mine.get(line.workload.uuid)
        found = speedup_of(line, base) if base is not None else None
        if found is not None:
            ratios.append(found.inverse())
    mean = geomean_of(ratios)
    if mean is None or mean.ci95 is None:
        return None, None
    return mean.value, (mean.ci95[0], mean.ci95[1])


StepSpec = tuple[Place, str, Folded]


class _Runner:
    """Runs steps, each once per key (cache/bisect/runs/<key>.jsonl and its .done marker)."""

    def __init__(
        self,
        request: BisectRequest,
        ends: Ends,
        config: FetchConfig,
        make_env: MakeEnv,
        echo: Echo,
        work: Path,
        revision: str,
    ) -> None:
        self.request, self.ends, self.config = request, ends, config
        self.make_env, self.echo, self.work = make_env, echo, work
        self.runs = cache_root() / "bisect" / "runs"
        self.runs.mkdir(parents=True, exist_ok=True)
        self.revision = revision

    def level(self, specs: Sequence[StepSpec]) -> list[Step]:
        """The steps of one level: those not cached run (here, or as one Slurm array)."""
        todo = [(place, self.report_of(place)) for place, _, _ in specs]
        missing = [(p, r) for p, r in todo if not r.with_suffix(".done").is_file()]
        missing = list({r: (p, r) for p, r in missing}.values())
        for place, _ in missing:
            self._ready(place)
        if self.request.slurm is not None and missing:
            self._slurm(missing)
        else:
            for place, report in missing:
                self._run_here(place, report)
        return [
            self._step(place, label, folded, report, cached=(place, report) not in missing)
            for (place, label, folded), (_, report) in zip(specs, todo, strict=True)
        ]

    def report_of(self, place: Place) -> Path:
        request = self.request
        key = {
            "closure": place.lock.closure_hash,
            "solution": request.solution,
            "revision": self.revision,
            "workloads": sorted(request.workloads),
            "suite": request.suite,
            "device": request.gpu or request.device,
            "runtime": request.runtime,
            "evaluation": asdict(request.evaluation),
        }
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
        return self.runs / f"{place.lock.closure_hash[:16]}-{digest[:16]}.jsonl"

    def _ready(self, place: Place) -> None:
        """The env made ready in the runtime: a local env is built without bytecode (it serves
        one run: offline.install_from_store), an image through the runtime as `run` does."""
        if self.request.runtime == "local":
            from envaudit.runtime.runtimes.local import ensure_environment, require_python

            require_python(place.lock.python, place.env)
            ensure_environment(place.lock, self.config, compile_bytecode=False)
        runtime = get_runtime(self.request.runtime, place.env)
        self.make_env(runtime, self._options(place), place.env)

    def _options(self, place: Place) -> RunOptions:
        return RunOptions(
            env=place.env,
            locks_dir=place.locks_dir,
            config=self.config,
            workload_timeout_s=self.request.workload_timeout_s,
        )

    def _run_here(self, place: Place, report: Path) -> None:
        self.echo(f"bisect-env: running {place.env} (closure {place.lock.closure_hash[:16]})")
        _clear(report)
        run_request = RunRequest(
            solution=self.request.solution,
            data_root=self.request.data_root,
            solutions_root=self.request.solutions_root,
            workloads=list(self.request.workloads),
            suite=self.request.suite,
            device=self.request.device,
            gpu=self.request.gpu,
            evaluation=self.request.evaluation,
            report=report,
        )
        run_solution(run_request, self.request.runtime, self._options(place), lambda *_: None)
        report.with_suffix(".done").write_text(place.lock.closure_hash + "\n")

    def _slurm(self, missing: list[tuple[Place, Path]]) -> None:
        """One job array for the level; each task's lines become its step's report."""
        assert self.request.slurm is not None
        tasks = [
            Task(self.request.solution, tuple(self.request.workloads), self._task_args(place))
            for place, _ in missing
        ]
        folder = self.work / "slurm" / missing[0][1].stem
        run = run_tasks(tasks, folder, self.request.slurm, self.request.gpu is not None, self.echo)
        for index, (place, report) in enumerate(missing):
            lines = task_report(folder, index)
            if index in run.gave_up or not lines.is_file():
                raise CannotBisect(
                    f"the Slurm task of {place.env} (closure {place.lock.closure_hash}) failed",
                    hint=f"its output: {folder / f'task-{index}.out'}",
                )
            _clear(report)
            shutil.copyfile(lines, report)
            report.with_suffix(".done").write_text(place.lock.closure_hash + "\n")

    def _task_args(self, place: Place) -> tuple[str, ...]:
        request = self.request
        args = ["--solution", request.solution, "--runtime", request.runtime]
        args += ["--env", place.env, "--locks-dir", str(place.locks_dir.resolve())]
        args += ["--data-root", str(request.data_root.resolve())]
        args += ["--solutions-root", str(request.solutions_root.resolve())]
        args += ["--timeout", str(request.workload_timeout_s)]
        for workload in request.workloads:
            args += ["--workload", workload]
        if request.suite:
            args += ["--suite", request.suite]
        if request.gpu is None:
            args += ["--device", "cpu"]
        return (*args, *request.evaluation.cli_args())

    def _step(self, place: Place, label: str, folded: Folded, report: Path, cached: bool) -> Step:
        lines = [line for _, line in result_lines(report) if line is not None]
        return Step(
            label=label,
            env=place.env,
            closure_hash=place.lock.closure_hash,
            applied=tuple(c.key for c in self.ends.changes if c.key in folded.applied),
            forced=dict(folded.forced),
            report=report,
            cached=cached,
            lines=lines,
        )


def _clear(report: Path) -> None:
    """A report that never completed is started again, not continued."""
    report.unlink(missing_ok=True)
    report.with_suffix(".done").unlink(missing_ok=True)


def _solution_revision(request: BisectRequest) -> str:
    """The solution's files by hash: a changed solution is a new key, not a cached step."""
    path, solution = find_solution(request.solution, request.solutions_root, request.data_root)
    files = {"(solution file)": path.read_bytes()}
    for source in solution.sources:
        content = source.content
        files[source.path] = (
            content.encode() if content is not None else (path.parent / source.path).read_bytes()
        )
    return solution_source_hash(files)


# --- what the user reads -----------------------------------------------------------------


def changes_text(ends: Ends, keys: Sequence[str]) -> str:
    """`toyaaa 1.0 -> 2.0, toybbb 1.0 -> 1.1`; `(none)` for A."""
    by_key = {c.key: c for c in ends.changes}
    return ", ".join(by_key[k].label() for k in keys) or "(none)"


def culprit_text(outcome: BisectOutcome) -> str:
    """The smallest set of changes that flips: `x 1 -> 2 together with y 1 -> 2 (why)`."""
    by_key: dict[str, Change] = {c.key: c for c in outcome.ends.changes}
    asked = [by_key[k].label() for k in outcome.culprits]
    partners = [k for k in outcome.group.applied if k not in outcome.culprits]
    text = " and ".join(asked)
    if partners:
        ordered = [c.key for c in outcome.ends.changes if c.key in partners]
        text += " together with " + changes_text(outcome.ends, ordered)
        text += " (" + "; ".join(outcome.group.forced[k] for k in ordered) + ")"
    return text


def step_table(outcome: BisectOutcome) -> list[list[str]]:
    """Rows of the step table: step, closure, what changed, status, time ratio, judged."""
    rows = [["step", "closure", "changes applied to A", "status", "time vs A", "like", "run"]]
    for step in outcome.steps:
        changed = changes_text(outcome.ends, step.applied) if step.label != "B" else "all"
        if step.forced:
            changed += " (forced: " + ", ".join(sorted(step.forced)) + ")"
        ratio = "" if step.ratio is None else f"{step.ratio:.3f}"
        if step.interval is not None and step.label != "A":
            ratio += f" [{step.interval[0]:.3f}, {step.interval[1]:.3f}]"
        rows.append(
            [
                step.label,
                step.closure_hash[:16],
                changed,
                step.status_text(),
                ratio,
                "B" if step.like_b else "A",
                "cached" if step.cached else "ran",
            ]
        )
    return rows


def summary_line(outcome: BisectOutcome) -> str:
    criterion = "status" if outcome.request.on == "status" else "time"
    if outcome.exit_code == EXIT_OK:
        return f"found: {culprit_text(outcome)} flips the {criterion}"
    return (
        f"the {criterion} flips only with {len(outcome.culprits)} groups of changes together:"
        f" {culprit_text(outcome)}"
    )


def as_dict(outcome: BisectOutcome) -> dict[str, object]:
    ends = outcome.ends
    return {
        "bisect_version": 1,
        "a": {
            "env": ends.a.lock.env,
            "closure_hash": ends.a.lock.closure_hash,
            "from": ends.a.origin,
        },
        "b": {
            "env": ends.b.lock.env,
            "closure_hash": ends.b.lock.closure_hash,
            "from": ends.b.origin,
        },
        "solution": outcome.request.solution,
        "criterion": outcome.request.on,
        "threshold_pct": outcome.request.threshold_pct,
        "changes": [asdict(c) for c in ends.changes],
        "culprits": list(outcome.culprits),
        "group": sorted(outcome.group.applied),
        "forced": dict(outcome.group.forced),
        "found": summary_line(outcome),
        "exit_code": outcome.exit_code,
        "steps": [
            {
                "step": s.label,
                "env": s.env,
                "closure_hash": s.closure_hash,
                "applied": list(s.applied),
                "forced": dict(s.forced),
                "statuses": s.statuses,
                "time_ratio": s.ratio,
                "interval": list(s.interval) if s.interval else None,
                "like": "B" if s.like_b else "A",
                "cached": s.cached,
                "report": str(s.report),
            }
            for s in outcome.steps
        ],
    }


def write_outcome(outcome: BisectOutcome) -> None:
    """OUT/bisect.json and OUT/results.jsonl (every step's lines), each written whole."""
    out = outcome.request.out
    out.mkdir(parents=True, exist_ok=True)
    replace_text(out / "bisect.json", json.dumps(as_dict(outcome), indent=1) + "\n")
    seen: set[Path] = set()
    text = []
    for step in outcome.steps:
        if step.report not in seen and step.report.is_file():
            seen.add(step.report)
            text.append(step.report.read_text())
    replace_text(out / "results.jsonl", "".join(text))
