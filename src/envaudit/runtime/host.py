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
from envaudit.runtime.jobs import RunRequest, plan_job
from envaudit.runtime.supervisor import BatchResult, run_batch


def run_on_host(
    req: RunRequest, resume: bool = False, workload_timeout_s: float = 300.0
) -> tuple[dict[str, object], BatchResult]:
    job, overrides = plan_job(req)
    job["context"] = {**job["context"], "env_check": env_check(str(job["context"]["env"]))}
    env = {**os.environ, **overrides}
    result = run_batch(
        job, sys.executable, env, workload_timeout_s=workload_timeout_s, resume=resume
    )
    return job, result


def env_check(env_name: str, locks_dir: Path = Path("locks")) -> dict[str, Any]:
    """This interpreter against the declared lock, for the result lines."""
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
