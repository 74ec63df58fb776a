"""The `host` runtime: the harness runs on the current interpreter, in child processes.

The interpreter is not built from the solution's lock, so it is checked against it first
(verify-env without file hashes) and every line records the outcome in `context.env_check`:
a "failure" measured outside the declared environment shows as such in the report. An
interpreter without what the harness imports (torch, safetensors) cannot run it at all: that is
said once, before any job, and is never a solution's status.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from envaudit.lock.files import LockError, env_dir, load_lock
from envaudit.lock.verify import (
    InstalledDist,
    compare,
    drift_record,
    installed_distributions,
    python_version,
)
from envaudit.runtime.base import RunOptions, Runtime
from envaudit.runtime.jit import jit_cache_folder, jit_environment, prepare_jit_cache
from envaudit.runtime.jobs import Job
from envaudit.runtime.supervision.launchers import ForkServerLauncher, Launcher
from envaudit.schema.result_line import EnvCheck

HARNESS_NEEDS = ("torch", "safetensors")
"""What the harness imports besides the standard library (found, not imported, here)."""


class HostRuntime(Runtime):
    summary = "this interpreter, checked against the declared lock"
    takes_env = False
    forks_workers = True
    unavailable_hint = (
        "use --runtime local (an environment made from the solution's lock) or --runtime docker,"
        " or run envaudit from an interpreter that has them"
    )

    def unavailable(self) -> str | None:
        missing = [name for name in HARNESS_NEEDS if importlib.util.find_spec(name) is None]
        if not missing:
            return None
        return (
            f"this interpreter ({sys.executable}) lacks {' and '.join(missing)},"
            " which the harness imports"
        )

    def warm(self, device_env: Mapping[str, str]) -> None:
        """This interpreter's fork server, started in the background (the JIT folder is a
        job's late variable, so any folder stands for it here); none in an interpreter that
        cannot run the harness."""
        if self.unavailable() is None:
            _launcher(device_env, Path("jit")).warm()

    def prepare(self, job: Job, options: RunOptions) -> tuple[Job, Launcher]:
        self.warm(job.device_env)  # its start overlaps the environment check (~0.4 s)
        check, closure = env_check(job.context.env, options.locks_dir)
        folder = jit_cache_folder(job.context.env, closure)
        job = job.with_context(
            env_check=check, closure_hash=closure, jit_cache=prepare_jit_cache(folder)
        )
        return job, _launcher(job.device_env, folder)


def _launcher(device_env: Mapping[str, str], jit_folder: Path) -> ForkServerLauncher:
    """Workers forked from this interpreter's server, with the job's device and JIT folder set
    as each is forked."""
    late = {**device_env, **jit_environment(str(jit_folder), os.environ)}
    return ForkServerLauncher(sys.executable, os.environ, late)


def env_check(env_name: str | None, locks_dir: Path = Path("locks")) -> tuple[EnvCheck, str | None]:
    """(this interpreter against the declared lock, for the result lines' `env_check`; the
    lock's closure hash, for their `context.closure_hash`, None when it cannot be read)."""
    if env_name is None:
        return EnvCheck(matches=None, reason="the solution declares no environment"), None
    try:
        lock = load_lock(env_dir(env_name, locks_dir))
        listing, version = this_interpreter()
        drift = compare(lock, listing, None, version)
    except LockError as exc:
        return EnvCheck(matches=None, reason=str(exc).splitlines()[0][:300]), None
    return drift_record(drift), lock.closure_hash


@functools.cache
def this_interpreter() -> tuple[tuple[InstalledDist, ...], str]:
    """What this interpreter holds and its Python version, listed once per process (two child
    interpreters, about a second on a large stack): every job of an audit checks against it."""
    listing = installed_distributions(sys.executable, records=False)
    return tuple(listing), python_version(sys.executable)
