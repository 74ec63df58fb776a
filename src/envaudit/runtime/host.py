"""The `host` runtime: the harness runs on the current interpreter, in child processes."""

from __future__ import annotations

import os
import sys

from envaudit.runtime.jobs import RunRequest, plan_job
from envaudit.runtime.supervisor import BatchResult, run_batch


def run_on_host(
    req: RunRequest, resume: bool = False, workload_timeout_s: float = 300.0
) -> tuple[dict[str, object], BatchResult]:
    job, overrides = plan_job(req)
    env = {**os.environ, **overrides}
    result = run_batch(
        job, sys.executable, env, workload_timeout_s=workload_timeout_s, resume=resume
    )
    return job, result
