"""Source builds: each declared source becomes one wheel, hashed into the store and into the lock.

A build runs in an isolated builder, a fresh uv venv holding only the source's locked
build_requires, and, when the lock has a CUDA toolchain (its role-"cuda" packages), that
toolchain in a prefix of its own, which is CUDA_HOME: both installed from the store offline with
every hash required; `uv build --no-build-isolation --offline` then builds against exactly that.
So what went into a wheel is what lock.json records, and no index is reachable during the build.
The toolchain stays out of the builder venv as it stays out of the run environment: its
nvidia-cuda-runtime (nvcc's release, for the headers) may differ from the one torch loads.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.utils import parse_wheel_filename

from envaudit.errors import EXIT_FAILED, EXIT_USAGE
from envaudit.lock import offline
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.lock.files import LockError, load_spec
from envaudit.lock.resolve import BASES_DIR, lock_env
from envaudit.lock.sources import (
    Checkout,
    SourceUnavailable,
    ensure_in_store,
    git_checkout,
    sdist_tree,
)
from envaudit.lock.store import Store
from envaudit.schema.locks import (
    Artifact,
    EnvSpec,
    Lock,
    LockedPackage,
    LockedSource,
    SourceSpec,
    seal,
    split_pin,
)
from envaudit.schema.paths import sha256_file
from envaudit.settings import BUILD_JOBS, cache_root, read

LOG_TAIL_LINES = 40
FIRST_ERRORS = 12
ERROR_LINE = re.compile(r"(\berror\b|\bfatal\b)", re.IGNORECASE)


def build_sources(
    lock: Lock,
    spec: EnvSpec,
    config: FetchConfig,
    work: Path | None = None,
    only: set[str] | None = None,
    rebuild: bool = False,
    env_dir: Path | None = None,
) -> tuple[Lock, list[str]]:
    """Build every source that has no wheel yet; with rebuild, also those named in `only` (all
    of them when `only` is None). Without rebuild, `only` narrows which unbuilt sources are
    built. Returns the re-sealed lock and one message per source."""
    _check_names(lock, only)
    declared = {s.name: s for s in spec.sources}
    sources: list[LockedSource] = []
    messages: list[str] = []
    for source in lock.sources:
        if _selected(source, only, rebuild):
            spec_of = declared.get(source.name)
            source, message = _try_build(lock, source, spec_of, config, work, env_dir)
        else:
            message = _skipped(source)
        sources.append(source)
        messages.append(message)
    return _with_sources(lock, sources), messages


def rebuild_recorded(lock: Lock, config: FetchConfig, env_dir: Path) -> list[str]:
    """Build each source whose recorded wheel the store lacks, from what the lock records, and
    count it done only where the store then holds the recorded wheel (its sha256): a lock made
    elsewhere reproduced here, never a new wheel taken for it. A build that makes another wheel
    is refused with both hashes (exit 1: the lock does not reproduce); one that cannot run here
    (sources unreachable, no compiler) with its reason (exit 2). The lock is not written."""
    store = Store(config.store)
    absent = [
        s
        for s in lock.sources
        if s.wheel is not None and s.built_in != "image" and not store.has(s.wheel)
    ]
    if not absent:
        return []
    declared = {s.name: s for s in load_spec(env_dir).sources}
    done: list[str] = []
    differ: list[str] = []
    unbuilt: list[str] = []
    for source in absent:
        recorded = source.wheel
        assert recorded is not None
        # Built as a source with no wheel yet: the wheel it returns is this build's, or None.
        unrecorded = source.model_copy(update={"wheel": None})
        built, message = _try_build(
            lock, unrecorded, declared.get(source.name), config, None, env_dir
        )
        if built.wheel is None:
            unbuilt.append(message)
        elif built.wheel.sha256 != recorded.sha256:
            differ.append(
                f"source {source.name}: the build here made {built.wheel.filename} (sha256"
                f" {built.wheel.sha256}), the lock records {recorded.filename} (sha256"
                f" {recorded.sha256})"
            )
        else:
            done.append(
                f"source {source.name}: rebuilt as the lock records it, {recorded.filename}"
                f" (sha256 {recorded.sha256})"
            )
    if differ:
        raise LockError(
            f"{lock.env}: the build here does not reproduce the lock: " + "; ".join(differ),
            exit_code=EXIT_FAILED,
            hint="a wheel the build here does not reproduce is not the one the lock names: fetch"
            " it from where it was built (ENVAUDIT_MIRRORS, --find-links), or lock again here"
            f" (`envaudit lock {lock.env} --rebuild NAME`) to record this build's",
        )
    if unbuilt:
        raise LockError(
            f"{lock.env}: its sources' recorded wheels cannot be built here: " + "; ".join(unbuilt),
            exit_code=EXIT_USAGE,
            hint="make the sources reachable (ENVAUDIT_GIT_BASES: a folder of OWNER/NAME git"
            " mirrors, for a machine without the network), or fetch the wheels from where they"
            " were built (ENVAUDIT_MIRRORS, --find-links)",
        )
    return done


def _with_sources(lock: Lock, sources: list[LockedSource]) -> Lock:
    """The lock with these sources, sealed again (its closure hash covers them)."""
    body = lock.model_dump(mode="json", exclude={"closure_hash"})
    body["sources"] = [s.model_dump(mode="json") for s in sources]
    return seal(body)


def lock_and_build(
    folder: Path,
    config: FetchConfig,
    build: bool = True,
    rebuild: list[str] | None = None,
    bases_dir: Path = BASES_DIR,
    substitute: str | None = None,
) -> tuple[Lock, list[str]]:
    """What `envaudit lock` does for one env: resolve, then build the sources (unless build is
    False: then each unbuilt git source's tree is only surveyed); `rebuild` names sources to
    build again even when a wheel was carried over. `substitute`: that declared substitute
    base's closure (its own Python: the sources are built or surveyed for it)."""
    sealed = lock_env(folder, config, bases_dir, substitute)
    spec = load_spec(folder, substitute)
    notes = [n for n in (s.stand_in() for s in sealed.sources) if n is not None]
    if not build:
        surveyed, messages = survey_sources(sealed, spec, config)
        return surveyed, [*messages, *notes]
    only = set(rebuild) if rebuild else None
    built, messages = build_sources(
        sealed, spec, config, only=only, rebuild=bool(rebuild), env_dir=folder
    )
    in_image = {s.name for s in built.sources if s.built_in == "image"}
    if in_image:  # built by the image only: their trees are surveyed, as --no-build does
        pairs = zip(built.sources, messages, strict=True)
        messages = [message for source, message in pairs if source.name not in in_image]
        built, survey_lines = survey_sources(built, spec, config, in_image)
        messages += survey_lines
    return built, [*messages, *notes]


def survey_sources(
    lock: Lock, spec: EnvSpec, config: FetchConfig, names: set[str] | None = None
) -> tuple[Lock, list[str]]:
    """For a lock made without building: check out each unbuilt git source as a build would and
    record the files of its pinned commits that the repository lacks (`absent_files`). An image
    built from the lock alone then builds from exactly the tree the lock describes, and refuses
    any other (image/context.py). A source whose repository cannot be reached here keeps what
    it had, with the reason. `names`: only these sources."""
    repositories = {s.name: s.git for s in spec.sources}
    sources: list[LockedSource] = []
    messages: list[str] = []
    for source in lock.sources:
        git = repositories.get(source.name)
        chosen = names is None or source.name in names
        if source.kind != "git" or source.wheel is not None or git is None or not chosen:
            sources.append(source)
            continue
        try:
            with build_folder(lock.env, source.name) as tmp:
                checkout = _checkout_from_remotes(source, git, config, tmp / "src")
        except SourceUnavailable as exc:
            sources.append(source)
            messages.append(f"source {source.name}: tree not surveyed: {exc}")
            continue
        absent = list(checkout.absent)
        update = {"absent_files": absent or None, "status": "surveyed"}
        sources.append(source.model_copy(update=update))
        lacking = f"{len(absent)} file(s) the repository lacks: {', '.join(absent[:3])}"
        messages.append(
            f"source {source.name}: tree surveyed at {source.rev}, not built; "
            + (lacking if absent else "complete")
        )
    if sources == lock.sources:
        return lock, messages
    return _with_sources(lock, sources), messages


def _check_names(lock: Lock, only: set[str] | None) -> None:
    unknown = sorted((only or set()) - {s.name for s in lock.sources})
    if unknown:
        known = ", ".join(s.name for s in lock.sources) or "none"
        raise LockError(f"{lock.env} has no source named {', '.join(unknown)} (sources: {known})")


def _selected(source: LockedSource, only: set[str] | None, rebuild: bool) -> bool:
    if source.built_in == "image":
        return False
    named = only is None or source.name in only
    return (named or source.wheel is None) if rebuild else (named and source.wheel is None)


def _skipped(source: LockedSource) -> str:
    if source.wheel is not None:
        return f"source {source.name}: wheel {source.wheel.filename} carried over (not rebuilt)"
    return f"source {source.name}: not built (not selected)"


def _try_build(
    lock: Lock,
    source: LockedSource,
    spec: SourceSpec | None,
    config: FetchConfig,
    work: Path | None,
    env_dir: Path | None = None,
) -> tuple[LockedSource, str]:
    """Build one source; when an input cannot be had here, keep it as it was, with the reason."""
    reason = _not_buildable(source, spec)
    if reason is not None:
        return source, f"source {source.name}: not built: {reason}"
    store = Store(config.store)
    try:
        with build_folder(lock.env, source.name, work) as tmp:
            built = _build(lock, source, spec, config, store, tmp, env_dir)
            kept = keep_build_log(f"{lock.env}-{source.name}", tmp / "build.log")
            spills = spill_warnings(kept.read_text(errors="replace"))
    except SourceUnavailable as exc:
        earlier = " (the earlier wheel is kept)" if source.wheel is not None else ""
        return source, f"source {source.name}: not built: {exc}{earlier}"
    assert built.wheel is not None
    wheel = built.wheel
    return built, (
        f"source {source.name}: built {wheel.filename} (sha256 {wheel.sha256}); build log kept"
        f" in {kept}; {len(spills)} register-spill warning(s) from ptxas"
        + "".join(f"\n  {line}" for line in spills[:20])
    )


SPILL = re.compile(r"ptxas\s*warning.*spill", re.IGNORECASE)


def spill_warnings(log: str) -> list[str]:
    """ptxas's register-spill warnings in a build log (--warn-on-spills), one line each."""
    return [line.strip() for line in log.splitlines() if SPILL.search(line)]


@contextmanager
def build_folder(env: str, name: str, work: Path | None = None) -> Iterator[Path]:
    """A build's scratch folder at a path fixed by env and source, emptied before and removed
    after. Compilers write source paths into what they build (nvcc's fatbin identifiers), so a
    random temporary name would make every rebuild's wheel differ. Two builds of one env's
    source on this machine take turns (an exclusive lock beside the folder)."""
    folder = (work or Path(tempfile.gettempdir())) / "envaudit-build" / env / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    with (folder.parent / f"{name}.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _not_buildable(source: LockedSource, spec: SourceSpec | None) -> str | None:
    """Why a build is not even attempted (None when it is)."""
    if source.rev_unresolved:
        return (
            f"rev {source.rev} is only a commit prefix; write the full commit in env.toml"
            " (git ls-remote / git rev-parse on its remote)"
        )
    if source.kind == "git" and (spec is None or spec.git is None):
        return "env.toml declares no git repository for it (lock.json is stale: lock again)"
    if not source.build_requires:
        return (
            "no build_requires are locked for it; declare it under [[sources]] in env.toml with"
            " its build_requires (e.g. setuptools==...)"
        )
    return None


def _build(
    lock: Lock,
    source: LockedSource,
    spec: SourceSpec | None,
    config: FetchConfig,
    store: Store,
    tmp: Path,
    env_dir: Path | None = None,
) -> LockedSource:
    tree, absent = _obtain(source, spec, config, store, tmp / "src")
    python, home = _builder(lock, source, config, store, tmp)
    env = build_environment(source, python, env_dir, home)
    wheel_file = _run_build(source, tree, env, tmp / "dist", tmp / "build.log")
    wheel = Artifact(
        filename=wheel_file.name, size=wheel_file.stat().st_size, sha256=sha256_file(wheel_file)
    )
    store.copy_in(wheel_file, wheel, f"{source.name} built wheel", "build")
    update: dict[str, object] = {
        "wheel": wheel,
        "status": "built",
        "absent_files": list(absent) or None,
    }
    if source.kind == "git":
        update["version"] = str(parse_wheel_filename(wheel.filename)[1])
    return source.model_copy(update=update)


def _obtain(
    source: LockedSource, spec: SourceSpec | None, config: FetchConfig, store: Store, dest: Path
) -> tuple[Path, tuple[str, ...]]:
    """The source tree, and the files of its commits the repository lacked (git only)."""
    if source.kind == "git":
        assert spec is not None and spec.git is not None and source.rev is not None
        checkout = _checkout_from_remotes(source, spec.git, config, dest)
        return checkout.path, checkout.absent
    if source.sdist is None:
        raise LockError(f"source {source.name}: lock.json records no sdist for it", 1)
    package = split_pin(spec.sdist)[0] if spec is not None and spec.sdist else source.name
    return sdist_tree(store, source.sdist, package, config, dest), ()


def _checkout_from_remotes(
    source: LockedSource, git: str, config: FetchConfig, dest: Path
) -> Checkout:
    """The first configured remote that has the repository; the reason when none does."""
    remotes = config.git_remotes(git)
    if not remotes:
        raise SourceUnavailable(
            f"repository {git}: no git base configured (set ENVAUDIT_GIT_BASES to a git host"
            " or mirror folder that holds it)"
        )
    failures = []
    for remote in remotes:
        try:
            assert source.rev is not None
            return git_checkout(
                source.name, remote, source.rev, source.submodules, dest, config.git_bases
            )
        except SourceUnavailable as exc:
            failures.append(str(exc))
            shutil.rmtree(dest, ignore_errors=True)
    raise SourceUnavailable("; ".join(failures))


def _builder(
    lock: Lock, source: LockedSource, config: FetchConfig, store: Store, tmp: Path
) -> tuple[Path, Path | None]:
    """The isolated builder, from the store only: a venv (tmp/builder) holding the source's
    build_requires, and the CUDA toolchain in its own prefix (tmp/toolchain). Returns the
    venv's python and the toolchain's CUDA_HOME (None without a toolchain)."""
    toolchain = lock.toolchain_packages()
    for package in [*source.build_requires, *toolchain]:
        _into_store(store, package, config, source.name)
    env = offline.uv_environment()
    failure = f"making the builder for source {source.name} failed"
    python = offline.create_venv(tmp / "builder", lock.python, env, failure)
    offline.install_from_store(
        python, store, _pinned(source.build_requires), env, failure, lock_env=lock.env
    )
    if not toolchain or lock.cuda is None:
        return python, None
    home = offline.install_toolchain(
        tmp / "toolchain",
        lock.cuda.prefix_subdir,
        python,
        store,
        _pinned(toolchain),
        env,
        f"installing the CUDA toolchain to build source {source.name} failed",
    )
    return python, home


def _pinned(packages: list[LockedPackage]) -> list[offline.Pinned]:
    return [(p.name, p.version, p.artifact) for p in packages]


def _into_store(store: Store, package: LockedPackage, config: FetchConfig, source: str) -> None:
    what = f"{package.name}=={package.version} (to build {source})"
    ensure_in_store(store, package.artifact, what, package.name, config)


def build_environment(
    source: LockedSource,
    python: Path,
    env_dir: Path | None = None,
    cuda_home: Path | None = None,
) -> dict[str, str]:
    """What the build backend sees: the caller's variables, the builder first on PATH, the
    toolchain (CUDA_HOME, its bin on PATH, CCCL's include folder for host compiles, which
    torch's extension builder adds only for nvcc), the arch list, the source's build_env, and
    uv kept offline."""
    root = python.parent.parent
    env = offline.uv_environment()
    env.update(UV_OFFLINE="1", PIP_NO_INDEX="1", VIRTUAL_ENV=str(root))
    # archive timestamps from a fixed date, so a rebuild has a chance to give the same bytes
    env.setdefault("SOURCE_DATE_EPOCH", "315532800")
    path = [str(python.parent)]
    if cuda_home is not None:
        env["CUDA_HOME"] = str(cuda_home)
        path.append(str(cuda_home / "bin"))
        cccl = cuda_home / "include" / "cccl"
        if cccl.is_dir():  # CUDA 13 keeps cuda/std/... there (CUTLASS includes it from g++)
            env["CPLUS_INCLUDE_PATH"] = _prepend(str(cccl), env.get("CPLUS_INCLUDE_PATH"))
    env["PATH"] = _prepend(os.pathsep.join(path), env.get("PATH"))
    if source.cuda_arch_list:
        env["TORCH_CUDA_ARCH_LIST"] = ";".join(source.cuda_arch_list)
    env.update(expand_env_dir(source, env_dir))
    jobs = build_jobs()
    env.update({key: str(jobs) for key in source.jobs_env})
    return env


def build_jobs() -> int:
    """Parallel jobs for a source build: ENVAUDIT_BUILD_JOBS, else the CPUs this process may use
    (a 2-core machine given 8 CUTLASS compiles at once runs out of memory, not time)."""
    jobs = read(BUILD_JOBS)
    return jobs if jobs is not None else max(1, len(os.sched_getaffinity(0)))


def _prepend(first: str, rest: str | None) -> str:
    return os.pathsep.join([first, rest]) if rest else first


def expand_env_dir(source: LockedSource, env_dir: Path | None) -> dict[str, str]:
    """build_env with `{env_dir}` replaced by the env's folder, where the source's declared
    `files` (hashed into the lock) live, e.g. a CMake toolchain file."""
    expanded = {}
    for key, value in source.build_env.items():
        if "{env_dir}" in value:
            if env_dir is None:
                raise LockError(f"source {source.name}: build_env {key} names {{env_dir}}", 2)
            value = value.replace("{env_dir}", str(env_dir.resolve()))
        expanded[key] = value
    return expanded


def keep_build_log(name: str, log: Path) -> Path:
    """A build's whole log, out of the build folder that is about to go: for a failure, the
    compiler's first error is usually far above the tail the message quotes; for a success, its
    warnings (register spills) are part of what was built."""
    folder = cache_root() / "build-logs"
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    shutil.copyfile(log, kept)
    return kept


def _run_build(source: LockedSource, tree: Path, env: dict[str, str], out: Path, log: Path) -> Path:
    """`uv build --wheel` against the builder; the one wheel it produced."""
    argv = [uv_binary(), "build", "--wheel", "--no-build-isolation", "--offline"]
    python = Path(env["VIRTUAL_ENV"]) / "bin" / "python"
    argv += ["--python", str(python), "--out-dir", str(out), "--no-create-gitignore", str(tree)]
    with log.open("w") as handle:
        done = subprocess.run(
            argv,
            cwd=tree,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if done.returncode != 0:
        lines = log.read_text(errors="replace").splitlines()
        kept = keep_build_log(source.name, log)
        errors = [ln for ln in lines[:-LOG_TAIL_LINES] if ERROR_LINE.search(ln)][:FIRST_ERRORS]
        first = ("first error lines:\n" + "\n".join(errors) + "\n...\n") if errors else ""
        raise LockError(
            f"source {source.name}: the build failed (uv build exited {done.returncode});"
            f" the whole log is kept in {kept}; {first}last {LOG_TAIL_LINES} lines:\n"
            + "\n".join(lines[-LOG_TAIL_LINES:]),
            exit_code=EXIT_FAILED,
        )
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) != 1:
        found = ", ".join(w.name for w in wheels) or "none"
        raise LockError(f"source {source.name}: expected one wheel from the build, got {found}", 1)
    return wheels[0]
