"""The `host` runtime: the harness runs on the current interpreter, in child processes.

The interpreter is not built from the solution's lock, so it is checked against it first
(verify-env without file hashes) and every line records the outcome in `context.env_check`:
a "failure" measured outside the declared environment shows as such in the report.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from envaudit.lock.files import LockError, env_dir, load_lock
from envaudit.lock.verify import compare, drift_record, installed_distributions, python_version
from envaudit.runtime.jobs import Job
from envaudit.runtime.launchers import Launcher, ProcessLauncher
from envaudit.runtime.registry import RunOptions, Runtime


class HostRuntime(Runtime):
    name = "host"
    summary = "this interpreter, checked against the declared lock"
    takes_env = False

    def prepare(self, job: Job, options: RunOptions) -> tuple[Job, Launcher]:
        check = env_check(job.context.env, options.locks_dir)
        job = job.with_context(env_check=check, closure_hash=check.get("lock_closure_hash"))
        env = {**os.environ, **job.device_env}
        return job, ProcessLauncher(sys.executable, env)


def env_check(env_name: str | None, locks_dir: Path = Path("locks")) -> dict[str, Any]:
    """This interpreter against the declared lock, for the result lines."""
    if env_name is None:
        return {"matches": None, "reason": "the solution declares no environment"}
    try:
        lock = load_lock(env_dir(env_name, locks_dir))
        drift = compare(
            lock,
            installed_distributions(sys.executable, records=False),
            None,
            python_version(sys.executable),
        )
    except LockError as exc:
        return {"matches": None, "reason": str(exc).splitlines()[0][:300]}
    return drift_record(drift, lock.closure_hash)
