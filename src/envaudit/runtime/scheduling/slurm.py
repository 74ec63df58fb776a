"""The slurm executor: an audit as one Slurm job array, one task per solution (or per shard of
its workloads), each task an `envaudit run` of the same runtime on the node it lands on.

What the cluster must share with this machine: the repository (dataset, solutions, locks), the
store and cache when tasks build environments, and OUT (each task writes its own lines to
OUT/slurm/task-<i>.jsonl; the audit merges them into OUT/results.jsonl when every task ended).

A task's exit code says whether it ran, not whether the solution passed: the batch script turns
envaudit's 0 and 1 (a failing solution is a result, recorded in lines) into 0, and keeps 2
(nothing could run) and deaths by signal. Tasks that end FAILED, TIMEOUT, NODE_FAIL,
OUT_OF_MEMORY, BOOT_FAIL or PREEMPTED, or COMPLETED without a line for each of their workloads,
are submitted again, up to `retries` times. The GPU of each task is the one Slurm binds
(`--gpus-per-task=1`); the task resolves its UUID, so lines name it as on a local run. Ctrl-C
cancels the audit's jobs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.schema.results import append_line, read_lines
from envaudit.schema.slurm import SlurmSettings

RETRYABLE = {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "PREEMPTED"}
FINISHED = RETRYABLE | {"COMPLETED", "CANCELLED", "DEADLINE"}
SCRIPT = """#!/bin/bash
# envaudit audit, one task of the array: `envaudit run` with the arguments of task-<i>.args
args_file={folder}/task-$SLURM_ARRAY_TASK_ID.args
mapfile -t args < "$args_file"
if [ -n "${{CUDA_VISIBLE_DEVICES:-}}" ] && [ "{gpu}" = 1 ]; then
    index=${{CUDA_VISIBLE_DEVICES%%,*}}
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$index")
    args+=(--gpu "$uuid")
elif [ "{gpu}" = 1 ]; then
    echo "no GPU bound to this task (CUDA_VISIBLE_DEVICES is empty)" >&2
    exit 2
fi
cd {cwd}
{python} -m envaudit run "${{args[@]}}"
rc=$?
[ "$rc" -le 1 ] && exit 0
exit "$rc"
"""


class SlurmError(EnvauditError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, EXIT_USAGE, hint=hint)


@dataclass(frozen=True)
class Task:
    solution: str
    workloads: tuple[str, ...]
    args: tuple[str, ...]


@dataclass
class SlurmRun:
    tasks: list[Task]
    job_ids: list[str] = field(default_factory=list)
    attempts: dict[int, int] = field(default_factory=dict)
    """Task index -> times submitted."""
    gave_up: list[int] = field(default_factory=list)
    wall_s: float = 0.0


def check_slurm() -> None:
    """sbatch, squeue, scontrol and scancel answer here (exit 2 otherwise)."""
    done = _call(["squeue", "-h", "-o", "%i"])
    if done.returncode != 0:
        raise SlurmError(
            f"Slurm does not answer here (squeue: {done.stderr.strip() or done.returncode})",
            hint="run where sbatch works; scripts/slurm/single-node.sh starts one on this machine",
        )


def run_tasks(
    tasks: list[Task],
    folder: Path,
    settings: SlurmSettings,
    gpu: bool,
    on_event: Callable[[str], None] | None = None,
) -> SlurmRun:
    """Submit every task as one array, resubmit the ones that failed, wait for all."""
    folder.mkdir(parents=True, exist_ok=True)
    run = SlurmRun(tasks)
    script = folder / "task.sh"
    script.write_text(
        SCRIPT.format(
            folder=shlex.quote(str(folder.resolve())),
            gpu=int(gpu),
            cwd=shlex.quote(str(Path.cwd())),
            python=shlex.quote(sys.executable),
        )
    )
    for index, task in enumerate(tasks):
        (folder / f"task-{index}.args").write_text(
            "".join(f"{arg}\n" for arg in (*task.args, "--report", str(task_report(folder, index))))
        )
    started = time.monotonic()
    pending = list(range(len(tasks)))
    try:
        while pending:
            job = _submit(script, folder, pending, settings, gpu)
            run.job_ids.append(job)
            for index in pending:
                run.attempts[index] = run.attempts.get(index, 0) + 1
            if on_event:
                on_event(f"slurm: job {job}, {len(pending)} task(s): {_ranges(pending)}")
            states = _wait(job, settings.poll_s)
            failed = [i for i in pending if _failed(states.get(i), folder, i, tasks[i])]
            retry = [i for i in failed if run.attempts[i] <= settings.retries]
            run.gave_up += [i for i in failed if i not in retry]
            if retry and on_event:
                on_event(f"slurm: resubmitting {len(retry)} task(s): {_ranges(retry)}")
            pending = retry
    except KeyboardInterrupt:
        for job in run.job_ids:
            _call(["scancel", job])
        raise
    run.wall_s = time.monotonic() - started
    return run


def task_report(folder: Path, index: int) -> Path:
    return folder / f"task-{index}.jsonl"


def merge_task_reports(run: SlurmRun, folder: Path, report: Path) -> int:
    """Every task's lines appended to the audit's report; how many."""
    count = 0
    for index in range(len(run.tasks)):
        path = task_report(folder, index)
        if not path.is_file():
            continue
        for _, line in read_lines(path):
            if line is not None:
                append_line(report, line)
                count += 1
    return count


def _submit(
    script: Path, folder: Path, indices: list[int], settings: SlurmSettings, gpu: bool
) -> str:
    argv = ["sbatch", "--parsable", f"--array={_ranges(indices)}", "--job-name=envaudit-audit"]
    argv += [f"--output={folder / 'task-%a.out'}", "--open-mode=append"]
    if gpu:
        argv.append("--gpus-per-task=1")
    if settings.partition:
        argv.append(f"--partition={settings.partition}")
    if settings.account:
        argv.append(f"--account={settings.account}")
    if settings.time_limit:
        argv.append(f"--time={settings.time_limit}")
    done = _call([*argv, str(script)])
    if done.returncode != 0:
        raise SlurmError(f"sbatch refused the audit's array: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def _wait(job: str, poll_s: float) -> dict[int, str]:
    """Poll until no task of the array is pending or running; task index -> final state."""
    while True:
        done = _call(["squeue", "-h", "-r", "-j", job, "-o", "%K %T"])
        active = [line for line in done.stdout.splitlines() if line.strip()]
        if done.returncode == 0 and not active:
            break
        time.sleep(poll_s)
    return _final_states(job)


def _final_states(job: str) -> dict[int, str]:
    """From `scontrol show job` (kept MinJobAge seconds after the end; no accounting needed)."""
    done = _call(["scontrol", "show", "job", "-o", job])
    states: dict[int, str] = {}
    for record in done.stdout.splitlines():
        fields = dict(part.split("=", 1) for part in record.split() if "=" in part)
        task, state = fields.get("ArrayTaskId", ""), fields.get("JobState", "")
        if task.isdigit():
            states[int(task)] = state
    return states


def _failed(state: str | None, folder: Path, index: int, task: Task) -> bool:
    if state in RETRYABLE or state is None:
        return True
    if state != "COMPLETED":
        return False
    path = task_report(folder, index)
    from envaudit.schema.result_line import kept_result_lines  # pydantic: not at the CLI's start

    kept = kept_result_lines(path) if path.is_file() else {}
    seen = {line.workload.uuid for line in kept.values()}
    return not set(task.workloads) <= seen


def _ranges(indices: list[int]) -> str:
    return ",".join(str(i) for i in sorted(indices))


def _call(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """A Slurm command; its exit code is the caller's to read (a missing tool is 127)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")


def array_record(run: SlurmRun) -> str:
    """A record of the array for OUT/slurm/array.json."""
    return json.dumps(
        {
            "jobs": run.job_ids,
            "tasks": [
                {
                    "solution": t.solution,
                    "workloads": list(t.workloads),
                    "attempts": run.attempts.get(i, 0),
                }
                for i, t in enumerate(run.tasks)
            ],
            "gave_up": run.gave_up,
            "wall_s": run.wall_s,
        },
        indent=1,
    )
