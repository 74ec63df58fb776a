"""The `local` runtime: the harness runs in a uv virtual environment made only from a lock and
the store (offline, `--require-hashes`), cached by closure hash.

The environment is built in place under `<cache>/envs/<closure_hash>/` behind a file lock, and
counts as built only once its marker file is written last; a half-built one is removed and built
again. The harness is not installed into it: its source folder goes on PYTHONPATH (read-only
use), as it is mounted into containers, so every runtime runs the same harness code: the staged
copy of its declared files (runtime/staging.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_FAILED, EXIT_USAGE
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.lock.fetch import fetch_env
from envaudit.lock.files import LockError, env_dir
from envaudit.lock.offline import (
    create_venv,
    install_from_store,
    install_toolchain,
    uv_environment,
)
from envaudit.lock.resolve import current_lock
from envaudit.lock.store import Store
from envaudit.runtime.base import Progress, RunOptions, Runtime
from envaudit.runtime.jit import jit_cache_folder, jit_environment, prepare_jit_cache
from envaudit.runtime.jobs import Job
from envaudit.runtime.staging import staged_harness
from envaudit.runtime.supervision.launchers import ForkServerLauncher, Launcher
from envaudit.schema.locks import Artifact, Lock
from envaudit.schema.paths import exclusive_lock
from envaudit.schema.result_line import EnvCheck
from envaudit.settings import cache_root

MARKER = ".envaudit-complete"
TOOLCHAIN = "toolchain"


@dataclass(frozen=True)
class LocalEnvironment:
    root: Path
    python: Path
    cuda_home: Path | None

    def variables(self, lock: Lock) -> dict[str, str]:
        """What a worker in this environment gets on top of the caller's variables."""
        harness = str(staged_harness())
        variables = {**lock.env_vars, "PYTHONPATH": harness, "PYTHONNOUSERSITE": "1"}
        variables["VIRTUAL_ENV"] = str(self.root)
        if self.cuda_home is not None:
            variables["CUDA_HOME"] = str(self.cuda_home)
        return variables


def installable(lock: Lock) -> list[tuple[str, str, Artifact]]:
    """(name, version, artifact) installed into the environment: runtime packages and the built
    wheels of sources (their sdists are build inputs, not installed). The CUDA toolchain goes
    into a prefix of its own (`toolchain_of`)."""
    chosen = [(p.name, p.version, p.artifact) for p in lock.runtime_packages()]
    for source in lock.sources:
        if source.wheel is None and source.built_in == "image":
            raise LockError(
                f"source {source.name} of {lock.env} is built only in the env's image"
                ' (built_in = "image"): no lock holds its wheel',
                exit_code=EXIT_USAGE,
                hint=f"run {lock.env} in a container runtime (`--runtime docker`)",
            )
        if source.wheel is None:
            raise LockError(
                f"source {source.name} of {lock.env} has no built wheel in lock.json",
                exit_code=EXIT_FAILED,
                hint=f"`envaudit lock {lock.env}` builds it; `envaudit fetch {lock.env}` says"
                " what is missing",
            )
        chosen.append((source.name, source.version or "", source.wheel))
    return chosen


def environment_root(lock: Lock, cache: Path | None = None) -> Path:
    """Where the environment of this lock is built (by closure hash)."""
    return (cache or cache_root()) / "envs" / lock.closure_hash


def ensure_environment(
    lock: Lock, config: FetchConfig, cache: Path | None = None, compile_bytecode: bool = True
) -> LocalEnvironment:
    """The environment of this lock, built from the store if it is not there yet (without
    bytecode when not `compile_bytecode`: offline.install_from_store says when)."""
    root = environment_root(lock, cache)
    root.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(root.parent / f"{lock.closure_hash}.lock"):
        if not (root / MARKER).is_file():
            shutil.rmtree(root, ignore_errors=True)
            _build(lock, Store(config.store), root, compile_bytecode)
    return _describe(lock, root)


def toolchain_of(lock: Lock) -> list[tuple[str, str, Artifact]]:
    """The toolchain a local env gets: a build-only one whole (local runs may build sources),
    else its run-time part (cuda.build_only_components left out, as in the image)."""
    if lock.cuda is not None and lock.cuda.build_only:
        packages = lock.toolchain_packages()
    else:
        packages = lock.run_toolchain_packages()
    return [(p.name, p.version, p.artifact) for p in packages]


def _build(lock: Lock, store: Store, root: Path, compile_bytecode: bool = True) -> None:
    packages = installable(lock)
    toolchain = toolchain_of(lock)
    absent = [a for _, _, a in [*packages, *toolchain] if not store.has(a)]
    if absent:
        names = ", ".join(a.filename for a in absent[:5]) + (" ..." if len(absent) > 5 else "")
        raise LockError(
            f"{len(absent)} artifact(s) of {lock.env} are not in the store {store.root}: {names}",
            hint=f"run `envaudit fetch {lock.env}` first",
        )
    env = uv_environment()
    failure = f"building the local environment of {lock.env} failed"
    python = create_venv(root, lock.python, env, failure)
    install_from_store(
        python, store, packages, env, failure, lock_env=lock.env, compile_bytecode=compile_bytecode
    )
    if toolchain and lock.cuda is not None:
        prefix = root / TOOLCHAIN
        install_toolchain(prefix, lock.cuda.prefix_subdir, python, store, toolchain, env, failure)
    (root / MARKER).write_text(lock.closure_hash + "\n")


def _describe(lock: Lock, root: Path) -> LocalEnvironment:
    """The toolchain prefix's nvidia/cu* folder is CUDA_HOME; never on the library path."""
    home = None
    if lock.cuda is not None and (root / TOOLCHAIN / lock.cuda.prefix_subdir / "bin").is_dir():
        home = root / TOOLCHAIN / lock.cuda.prefix_subdir
    return LocalEnvironment(root=root, python=root / "bin" / "python", cuda_home=home)


def require_python(version: str, env: str) -> None:
    """The lock's Python must be installed here (uv downloads none): checked before fetching."""
    done = subprocess.run(
        [uv_binary(), "python", "find", "--system", version],
        capture_output=True,
        text=True,
        env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"},
        check=False,
    )
    if done.returncode != 0:
        raise LockError(
            f"the local environment of {env} needs Python {version}, which is not installed here",
            hint=f"install Python {version}, or run it in a container (--runtime docker), or in"
            " another lock (--env)",
        )


class LocalRuntime(Runtime):
    forks_workers = True
    summary = "a uv venv built offline from the lock and the store"

    def unavailable(self) -> str | None:
        try:
            uv_binary()
        except LockError as exc:
            return str(exc)
        return None

    def ensure(self, env: str, options: RunOptions, progress: Progress) -> str | None:
        lock = current_lock(env_dir(env, options.locks_dir))
        root = environment_root(lock)
        if (root / MARKER).is_file():
            return None
        require_python(lock.python, env)
        fetch_env(env, options.locks_dir, options.config, progress.on_fetch)
        ensure_environment(lock, options.config)
        return f"made the local environment of {env} ({lock.closure_hash[:16]})"

    def prepare(self, job: Job, options: RunOptions) -> tuple[Job, Launcher]:
        """Build (or reuse) the lock's environment; without options.env the solution's declared
        env is used, with it the line records both."""
        lock = current_lock(env_dir(job.env_to_run(options.env), options.locks_dir))
        local = ensure_environment(lock, options.config)
        folder = jit_cache_folder(lock.env, lock.closure_hash)
        job = job.with_context(
            env=lock.env,
            closure_hash=lock.closure_hash,
            jit_cache=prepare_jit_cache(folder),
            env_check=EnvCheck(matches=True, built_from_lock=True),
        )
        inherited = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env = {**inherited, **local.variables(lock)}
        late = {**job.device_env, **jit_environment(str(folder), env)}
        return job, ForkServerLauncher(str(local.python), env, late)
