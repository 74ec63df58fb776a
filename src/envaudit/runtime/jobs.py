"""Resolve a run request (solution name, workload selection, device) into a harness job.

The resolved job names absolute files, the exact workload UUIDs and the device, so the harness
needs nothing but the job to run; every problem with the request is a RunRequestError that
names the solution, definition, suite or workload at fault.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from envaudit.dataset.env_map import ENV_MAP_FILE, EnvAssignment, EnvMapError, load_env_map
from envaudit.dataset.solutions import (
    OUR_FILE,
    SolutionIndex,
    SolutionIndexError,
    index_solutions,
    solution_roots,
)
from envaudit.dataset.traceset import DatasetRootError, TraceSet, load_traceset
from envaudit.errors import EnvauditError
from envaudit.runtime.devices import require_gpu
from envaudit.schema.models import Solution
from envaudit.schema.names import shown
from envaudit.schema.options import EvalOptions
from envaudit.schema.paths import FolderBusy, folder_writers
from envaudit.schema.progress import JobView
from envaudit.schema.reading import UnreadableFile, load_json, non_regular
from envaudit.schema.results import (
    NotResultLines,
    check_result_file,
    distributions_path,
    logs_folder,
)
from envaudit.schema.sources import source_outside
from envaudit.settings import cache_root

if TYPE_CHECKING:  # the line models load with the runtime, not with every command
    from envaudit.schema.result_line import EnvCheck


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
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    reference_cache: Path | None = None
    report: Path | None = None


def find_solution(
    name: str,
    solutions_root: Path,
    data_root: Path | None = None,
    index: SolutionIndex | None = None,
) -> tuple[Path, Solution]:
    """(its file, the solution) for `name`: a path to a solution file or its folder, else the
    solution of that name under `solutions_root` or the data root's solutions/, in our layout
    or FlashInfer-Bench's (dataset/solutions.py; `index`: those folders indexed already).
    RunRequestError (exit 2) for a name no file or two files hold, and for a file that is not a
    valid solution (naming it and the field)."""
    path = _given_path(name)
    if path is None:
        path = _indexed(name, index, solution_roots(solutions_root, data_root))
    try:
        solution = Solution.model_validate(load_json(path))
    except UnreadableFile as exc:  # a device, not UTF-8, nested too deeply
        raise RunRequestError(f"{exc}; not a solution file") from None
    except ValidationError as exc:
        raise RunRequestError(_invalid(path, exc)) from None
    except ValueError as exc:  # not JSON
        raise RunRequestError(f"{path}: not a valid {_what(path)}: {exc}"[:2000]) from None
    except OSError as exc:
        raise RunRequestError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    _require_sources_inside(path, solution)
    return path.resolve(), solution


def _given_path(name: str) -> Path | None:
    """The solution file `name` names as a path (a file, or a folder of ours), if it does."""
    if not name.strip():
        return None
    return next((p for p in (Path(name), Path(name) / OUR_FILE) if _is_file(p)), None)


def _indexed(name: str, index: SolutionIndex | None, roots: list[Path]) -> Path:
    """The one file holding solution `name` under `roots` (in `index`, when given)."""
    try:
        index = index_solutions(roots) if index is None else index
        found = index.find(name)
    except SolutionIndexError as exc:
        raise RunRequestError(str(exc), hint=exc.hint) from None
    if found is None:
        known = sorted(index.files)
        listed = ", ".join(known[:KNOWN_SHOWN]) + (" ..." if len(known) > KNOWN_SHOWN else "")
        raise RunRequestError(
            f"no solution {shown(name)} under {index.where()}",
            hint=f"known solutions ({len(known)}): {listed}" if known else None,
        )
    return found.path


KNOWN_SHOWN = 60
"""Names a 'no solution' hint lists (a FlashInfer-Bench root may hold thousands)."""


def _what(path: Path) -> str:
    return "solution.json" if path.name == OUR_FILE else "solution file"


def _invalid(path: Path, exc: ValidationError) -> str:
    """`path: not a valid solution...: field: problem (got value); ...`, every field at fault
    (a FlashInfer-Bench C++ solution's `spec.entry_point`, say), values cut short."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "(the whole file)"
        got = err.get("input")
        value = f" (got {shown(got)})" if isinstance(got, str) else ""
        if value and shown(got) in err["msg"]:
            value = ""  # the message quotes it already
        problems.append(f"{where}: {err['msg']}{value}")
    return f"{path}: not a valid {_what(path)}: {'; '.join(problems)}"[:2000]


def _require_sources_inside(path: Path, solution: Solution) -> None:
    """RunRequestError (exit 2) for a source file read from outside the solution's folder (a
    symbolic link out of it, '..'): what runs must be what its hash and export see."""
    for source in solution.sources:
        problem = None if source.content is not None else source_outside(path.parent, source.path)
        if problem is not None:
            raise RunRequestError(
                f"{path}: {problem}", hint="copy the file into the solution's folder"
            )


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long for the file system, ...
        return False


def select_workloads(ts: TraceSet, definition: str, req: RunRequest) -> list[str]:
    own = [w.uuid for w in ts.workloads_of(definition)]
    if req.workloads:
        unknown = [u for u in req.workloads if u not in own]
        if unknown:
            raise RunRequestError(f"workload {unknown[0]} is not a workload of {definition}")
        return list(req.workloads)
    if req.suite is not None:
        try:
            members = ts.suite_uuids(req.suite)
        except KeyError:
            raise RunRequestError(
                f"no suite {shown(req.suite)} in {ts.root}/suites",
                hint=f"suites: {', '.join(sorted({*ts.suites, 'all'}))}",
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
    if req.device is not None:
        raise RunRequestError(
            f"--device takes only `cpu`, got {req.device!r}",
            hint="name a GPU by its UUID with --gpu GPU-<uuid> (`envaudit doctor` lists them)",
        )
    raise RunRequestError("choose where to run: --device cpu or --gpu GPU-<uuid>")


def check_output(path: Path, what: str, folder: bool = False) -> None:
    """RunRequestError (exit 2) unless `path` can be written as a file (or, with `folder`, as a
    folder): it is one already and writable, or it can be created where the nearest existing
    parent is a writable folder. Nothing is created."""
    if path.is_symlink():  # never written through: it may point at anything
        raise RunRequestError(
            f"{what} {path} is a symbolic link; envaudit writes only its own files and folders",
            hint=f"name a {'folder' if folder else 'regular file'} (it is created when absent)",
        )
    if path.exists():
        if folder and not path.is_dir():
            raise RunRequestError(f"{what} {path} is a file, not a folder", hint="name a folder")
        if not folder and path.is_dir():
            raise RunRequestError(
                f"{what} {path} is a folder", hint="name a file (it is created when absent)"
            )
        kind = None if folder else non_regular(path)
        if kind is not None:  # /dev/null, /dev/full, a FIFO: read whole, or hang, or lose lines
            raise RunRequestError(
                f"{what} {path} is {kind}, not a regular file",
                hint="name a regular file (it is created when absent)",
            )
        if not os.access(path, os.W_OK | (os.X_OK if folder else 0)):
            raise RunRequestError(f"{what} {path} is not writable", hint="name another place")
        return
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise RunRequestError(
            f"{what} {path} cannot be created: {existing} is a file, not a folder",
            hint="name a place under a folder",
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise RunRequestError(
            f"{what} {path} cannot be created: {existing} is not writable"
            " (permissions or a read-only file system)",
            hint="name a place you can write to",
        )


@contextlib.contextmanager
def appending_to(folder: Path) -> Iterator[None]:
    """Hold the folder a run or an audit appends its lines in, shared with other appenders and
    never with a merge rewriting it (schema.paths.folder_writers); RunRequestError (exit 2)
    while a merge holds it."""
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(folder_writers(folder, exclusive=False))
        except FolderBusy:
            raise RunRequestError(
                f"{folder}: `envaudit merge` is rewriting this folder now; lines appended while"
                " it renames results.jsonl would be lost",
                hint="run again when the merge has ended, or write elsewhere",
            ) from None
        except OSError:
            pass  # no folder to hold (a file, a link, no permission): the run's checks say so
        yield


def check_cache() -> None:
    """The cache folder (job folders, environments, staged harness copies) can be written."""
    check_output(cache_root(), "the cache folder (ENVAUDIT_CACHE)", folder=True)


def check_report(path: Path, what: str) -> None:
    """The report and the files beside it can be written, and what the report holds already
    are result lines."""
    check_output(path, what)
    check_output(distributions_path(path), f"{what}: beside it,")
    check_output(logs_folder(path), f"{what}: beside it,", folder=True)
    try:
        check_result_file(path)
    except NotResultLines as exc:
        raise RunRequestError(
            f"{what}: {exc}", hint="name a new file, or a result file envaudit wrote"
        ) from None
    except OSError as exc:
        raise RunRequestError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None


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
    env_check: EnvCheck | None = None
    jit_cache: str | None = None
    """"cold" when the job's compile cache folder (runtime/jit.py) was empty, else "warm"."""
    assigned_env: str | None = None
    env_assigned: str | None = None
    """For a solution that declares none, the env the data's envs.toml assigned and by which
    rule (dataset/env_map.py); the line says "--env" when the override replaced it."""

    def record(self) -> dict[str, Any]:
        """The line's `context`, written through its model (schema.result_line.Context): the
        fields always present, and the optional ones only where they say something."""
        from envaudit.schema.result_line import Context

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
        if self.jit_cache is not None:
            found["jit_cache"] = self.jit_cache
        if self.env_check is not None:
            found["env_check"] = self.env_check
        if self.declared_env != self.env:
            found["declared_env"] = self.declared_env
        if self.declared_env is None and self.env is not None:
            chosen = self.assigned_env == self.env and self.env_assigned
            found["env_assigned"] = chosen or "--env"
        return Context(**found).model_dump(mode="json", exclude_unset=True)


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
    evaluation: EvalOptions = field(default_factory=EvalOptions)
    reference_cache: Path | None = None
    device_env: Mapping[str, str] = field(default_factory=dict)
    """Variables that select the device for the worker (CUDA_VISIBLE_DEVICES)."""
    dependencies: tuple[str, ...] = ()
    """The solution's `spec.dependencies`, checked against the lock it runs in."""
    language: str = ""
    """The solution's `spec.language`: a cuda one needs the lock's nvcc at run time."""
    binding: str = ""
    """The solution's `spec.binding` (empty: FlashInfer-Bench's default, TVM-FFI)."""

    def with_context(self, **changes: Any) -> Job:
        return replace(self, context=replace(self.context, **changes))

    def env_to_run(self, override: str | None) -> str:
        """The lock this job runs in: the override, else the one the solution declares, else
        the one the data's envs.toml assigns it."""
        env = override or self.context.env
        if env is None:
            raise RunRequestError(
                f"solution {self.solution} declares no environment (no `env` in its solution"
                f" file) and no {ENV_MAP_FILE} beside the data assigns one",
                hint=f"pass --env ENV to run it in a lock of locks/, or map it in {ENV_MAP_FILE}"
                " (docs/dataset-format.md)",
            )
        return env

    def worker_view(
        self, seen_as: Callable[[Path], str], workloads: Sequence[str], gated: bool = False
    ) -> JobView:
        """job.json for the worker: these workloads, paths as the worker sees them. A launcher
        that does not mount the reference cache (the docker runtime for a caller who is not
        root: docs/harness.md, "What a solution can reach") gives its worker none."""
        cache = None
        if self.reference_cache is not None:
            with contextlib.suppress(EnvauditError):
                cache = seen_as(self.reference_cache)
        return {
            "definition": self.definition,
            "solution": self.solution,
            "definition_file": seen_as(self.definition_file),
            "workload_file": seen_as(self.workload_file),
            "data_root": seen_as(self.data_root),
            "solution_file": seen_as(self.solution_file),
            "workloads": list(workloads),
            "device": self.device,
            "options": self.evaluation.record(),
            "reference_cache": cache,
            "context": self.context.record(),
            "gated": gated,
        }


def check_evaluation(options: EvalOptions) -> None:
    """RunRequestError (exit 2) for options the harness cannot honour (--measure-ms range)."""
    problem = options.problem()
    if problem is not None:
        raise RunRequestError(problem[0], hint=problem[1])


REPORT_STEM_MAX = 160
"""Bytes of a default report's stem: its side files add up to ".distributions.jsonl" to it,
and a file name may have 255 bytes."""


def default_report(solution: str, tag: str) -> Path:
    """results/SOLUTION.TAG.jsonl; a stem too long for its side files (a solution name may
    have 255 bytes, a GPU tag 40 more) keeps a prefix of the name and a hash of the whole, so
    two long names never share a report."""
    stem = f"{solution}.{tag}"
    if len(stem.encode()) > REPORT_STEM_MAX:
        digest = hashlib.sha256(stem.encode()).hexdigest()[:16]
        keep = REPORT_STEM_MAX - len(tag.encode()) - len(digest) - 2
        prefix = solution.encode()[:keep].decode(errors="ignore")
        stem = f"{prefix}-{digest}.{tag}"
    return Path("results") / f"{stem}.jsonl"


def _workload_file(ts: TraceSet, definition: str, uuids: list[str]) -> str:
    """The one file (relative to the root) holding the selected workloads, where the loader
    read them: a job's worker reads one workload file."""
    files = ts.workload_files(definition, uuids)
    if len(files) > 1:
        raise RunRequestError(
            f"the selected workloads of {definition} are in {len(files)} files under"
            f" {ts.root}: {', '.join(files)}; a run reads them from one",
            hint="select the workloads of one file (--workload UUID or a suite), or keep a"
            " definition's workloads in one .jsonl",
        )
    return files[0]


def plan_job(req: RunRequest, runtime: str) -> Job:
    """The job for this request, before the runtime fills in its part of the context. Every
    part of the request is checked here, before any work: the solution, data and workloads, the
    device (a GPU must exist on this machine), and every place the run will write."""
    solution_file, solution = find_solution(req.solution, req.solutions_root, req.data_root)
    try:
        ts = load_traceset(req.data_root)
    except DatasetRootError as exc:
        raise RunRequestError(str(exc)) from None
    dfile = ts.definitions.get(solution.definition)
    if dfile is None:
        raise RunRequestError(
            f"solution {solution.name} implements {solution.definition}:"
            f" {ts.refusal_of(solution.definition)}"
        )
    assigned = assigned_env(solution, req.data_root)
    uuids = select_workloads(ts, solution.definition, req)
    if not uuids:
        raise RunRequestError(f"no workloads of {solution.definition} selected")
    workload_file = req.data_root / _workload_file(ts, solution.definition, uuids)
    device, device_id, device_env = device_of(req)
    if req.gpu:
        require_gpu(req.gpu)
    tag = "cpu" if device == "cpu" else device_id
    report = req.report or default_report(solution.name, tag)
    check_report(report, "--report" if req.report else "the report")
    check_cache()
    if req.reference_cache is not None:
        check_output(req.reference_cache, "--reference-cache", folder=True)
    check_evaluation(req.evaluation)
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
        evaluation=req.evaluation,
        reference_cache=req.reference_cache.resolve() if req.reference_cache else None,
        device_env=device_env,
        dependencies=tuple(solution.spec.dependencies or ()),
        language=solution.spec.language,
        binding=solution.spec.binding or "",
        context=RunContext(
            runtime=runtime,
            env=solution.env or (assigned.env if assigned else None),
            declared_env=solution.env,
            device_id=device_id,
            assigned_env=assigned.env if assigned else None,
            env_assigned=assigned.how if assigned else None,
        ),
    )


def assigned_env(solution: Solution, data_root: Path) -> EnvAssignment | None:
    """The env the data's envs.toml gives a solution that declares none (None otherwise)."""
    if solution.env:
        return None
    try:
        return load_env_map(data_root).assign(solution.name, solution.author, solution.definition)
    except EnvMapError as exc:
        raise RunRequestError(str(exc), hint=exc.hint) from None
