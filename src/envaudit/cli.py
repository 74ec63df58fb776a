"""The `envaudit` command line: Typer commands that parse flags, call one use case each
(envaudit.commands, never the layers below it) and render what it returns. The environment commands
are in cli_envs.py, the dataset and report commands in cli_data.py, and the options and the
error handling every command shares in cli_common.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envaudit import __version__
from envaudit.cli_common import (
    FROM_FLAGS,
    DataRoot,
    DefinitionOption,
    EnvOption,
    JsonOption,
    LocksDir,
    OverOption,
    RunRuntimeOption,
    RuntimeOption,
    SolutionsRoot,
    SubstituteOption,
    TimeoutOption,
    evaluation_flags,
    finite_seconds,
    json_text,
    parse_path,
    reported,
    runtime_choice,
    slurm_flags,
    unique_names,
    usage_error,
)
from envaudit.cli_data import data_app
from envaudit.cli_envs import base_app, envs_app
from envaudit.errors import EXIT_FAILED, EXIT_OK, hint_line
from envaudit.schema.options import EvalOptions
from envaudit.schema.slurm import SlurmSettings

NO_SLURM = SlurmSettings()
"""Stands for the `slurm` settings `audit` gets from slurm_flags."""

app = typer.Typer(
    name="envaudit",
    help="Validate and time kernel solutions, each in the exact environment it declares.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion for bash, zsh, fish and PowerShell
    pretty_exceptions_enable=False,
)
app.add_typer(data_app)
app.add_typer(envs_app)
app.add_typer(base_app, name="base")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"envaudit {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """envaudit: one hash-pinned environment per solution, one shared harness, one report."""


@app.command()
def doctor(
    locks_dir: Annotated[Path, typer.Option("--locks-dir", help="Folder of lock dirs.")] = Path(
        "locks"
    ),
    as_json: JsonOption = False,
) -> None:
    """What is available here: engine, GPUs, runtimes, uv, store, images; which runtime
    `audit` picks."""
    import dataclasses
    import json

    from envaudit.commands.doctor import diagnose

    if not locks_dir.is_dir():
        usage_error(f"--locks-dir {locks_dir} is not a folder", "point it at the folder of <env>/")
    with reported():
        checks = diagnose(locks_dir)
    failed = any(c.severity == "error" for c in checks)
    if as_json:
        answer = {"failed": failed, "checks": [dataclasses.asdict(c) for c in checks]}
        typer.echo(json.dumps(answer, indent=1))
        raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)
    width = max(len(c.name) for c in checks)
    for check in checks:
        typer.echo(f"{check.severity:7} {check.name:{width}}  {check.message}")
        if check.hint:
            typer.echo(f"{'':7} {'':{width}}  {hint_line(check.hint)}")
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
@evaluation_flags("run")
def run(
    solution: Annotated[
        str | None, typer.Option("--solution", help="Solution name under solutions/.")
    ] = None,
    candidate: Annotated[
        Path | None,
        typer.Option(
            "--candidate",
            help="A main.py that is not a solution folder, run for --definition (nothing is"
            " written into solutions/).",
        ),
    ] = None,
    definition: DefinitionOption = None,
    workload: Annotated[
        list[str] | None, typer.Option("--workload", help="Only this workload UUID.")
    ] = None,
    suite: Annotated[
        str | None,
        typer.Option(
            "--suite",
            help="smoke, dev, all, ... Without --suite or --workload, every workload of the"
            " definition (audit's default is a suite: dev on a GPU, smoke on the CPU).",
        ),
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID (GPU-...).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: RunRuntimeOption = None,
    env: EnvOption = None,
    over: OverOption = None,
    substitute: SubstituteOption = None,
    reference_cache: Annotated[
        Path | None,
        typer.Option(
            "--reference-cache",
            help="Folder keeping the references computed, reused by later runs of the same"
            " definition, workload and draw (audit keeps one in --out).",
            parser=parse_path,
        ),
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Result lines file.", parser=parse_path)
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Skip workloads that have a line in --report (same solution, closure, device).",
        ),
    ] = False,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    locks_dir: LocksDir = Path("locks"),
    evaluation: EvalOptions = FROM_FLAGS,
    as_json: JsonOption = False,
) -> None:
    """Validate and time one solution on its definition's workloads (default runtime: host)."""
    from envaudit.commands.run import SolutionRunRequest, run_requested, solution_to_run
    from envaudit.console import make_env, print_run_summary, run_rows

    chosen = runtime_choice(runtime, "host")
    unique_names([solution] if solution is not None else [], "--solution")
    workload = unique_names(workload, "--workload", plain=False)
    with reported():
        solution, solutions_root = solution_to_run(
            solution, candidate, definition, data_root, solutions_root, env
        )
    request = SolutionRunRequest(
        solution=solution,
        solutions_root=solutions_root,
        runtime=chosen,
        data_root=data_root,
        locks_dir=locks_dir,
        workloads=workload,
        suite=suite,
        device=device,
        gpu=gpu,
        env=env,
        over=over,
        substitute=substitute,
        evaluation=evaluation,
        reference_cache=reference_cache,
        report=report,
        resume=resume,
        workload_timeout_s=finite_seconds(timeout, "--timeout"),
    )
    with reported():
        done = run_requested(request, make_env)
    rows = run_rows(done.report, done.solution, done.written, done.skipped)
    failed = not all(row.passed for row in rows)
    if as_json:
        answer = {"report": done.report, "solution": done.solution, "failed": failed}
        typer.echo(json_text({**answer, "workloads": rows, "skipped": done.skipped}))
    else:
        print_run_summary(done.report, rows, done.skipped)
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@app.command()
def reproduce(
    line: Annotated[
        str,
        typer.Argument(
            help="A result or trace file and line number (FILE:N), or a file with --solution"
            " and --workload."
        ),
    ],
    solution: Annotated[str | None, typer.Option("--solution", help="Pick by solution.")] = None,
    workload: Annotated[
        str | None, typer.Option("--workload", help="Pick by workload UUID or label.")
    ] = None,
    gpu: Annotated[
        str | None, typer.Option("--gpu", help="This GPU (default: the first of the model).")
    ] = None,
    other_driver: Annotated[
        bool, typer.Option("--other-driver", help="Run on a GPU with another driver too.")
    ] = False,
    runtime: RuntimeOption = None,
    over: OverOption = None,
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder for the new line (reproduce.jsonl).", parser=parse_path),
    ] = Path("results/reproduce"),
    as_json: JsonOption = False,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Run a recorded line again in what it records (its lock by closure hash and its solution
    revision by hash, from git history when they moved on; a GPU of its model) and print both
    side by side with the time ratio now/then and its interval. Exit 0 when it reproduces within
    noise, 1 when it does not, 2 when it cannot be attempted."""
    from envaudit.commands.reproduce import RecordedLine, ReproduceRequest, reproduce_line
    from envaudit.console import make_env

    ask = ReproduceRequest(
        runtime,
        over,
        finite_seconds(timeout, "--timeout"),
        data_root,
        solutions_root,
        locks_dir,
        gpu,
        other_driver,
        out,
    )
    with reported():
        outcome = reproduce_line(RecordedLine(line, solution, workload), ask, make_env)
    typer.echo(outcome.json_text() if as_json else outcome.text(), nl=False)
    raise typer.Exit(outcome.exit_code)


@app.command()
@evaluation_flags("audit")
@slurm_flags()
def audit(
    solution: Annotated[
        list[str] | None,
        typer.Option("--solution", help="Only these (default: all, or --definition's)."),
    ] = None,
    candidate: Annotated[
        Path | None,
        typer.Option("--candidate", help="A main.py run beside --definition's solutions."),
    ] = None,
    definition: Annotated[
        str | None,
        typer.Option(
            "--definition",
            help="Every solution of this definition (either layout); with --candidate, the"
            " definition it implements.",
        ),
    ] = None,
    gpu: Annotated[list[str] | None, typer.Option("--gpu", help="GPU UUID (repeatable).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    runtime: RuntimeOption = None,
    env: EnvOption = None,
    over: OverOption = None,
    substitute: SubstituteOption = None,
    executor: Annotated[
        str, typer.Option("--executor", help="local, or slurm (one job array).")
    ] = "local",
    suite: Annotated[
        str | None, typer.Option("--suite", help="Default: dev on a GPU, smoke on the CPU.")
    ] = None,
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder for results.jsonl and its logs.", parser=parse_path),
    ] = Path("results/audit"),
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="Skip workloads that already have a line in OUT/results.jsonl."
        ),
    ] = False,
    each_gpu: Annotated[
        bool, typer.Option("--each-gpu", help="Every solution on every --gpu, to compare cards.")
    ] = False,
    cpu_jobs: Annotated[
        int,
        typer.Option("--cpu-jobs", min=1, help="CPU audits: jobs at once (timings share the CPU)."),
    ] = 1,
    gpu_wait: Annotated[
        float, typer.Option("--gpu-wait", min=0, help="Seconds to wait for a busy GPU.")
    ] = 0.0,
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    locks_dir: LocksDir = Path("locks"),
    evaluation: EvalOptions = FROM_FLAGS,
    slurm: SlurmSettings = NO_SLURM,
    as_json: JsonOption = False,
) -> None:
    """Run every solution on the chosen GPUs (or the CPU); all lines go to OUT/results.jsonl.
    GPUs of one model share the jobs, one at a time each, longest first (--each-gpu: every
    solution on every GPU). Container runtimes build the images that are missing first."""
    from envaudit.commands import audit as audit_command
    from envaudit.console import audit_progress, make_env, print_audit_summary

    names = unique_names(solution, "--solution")
    with reported():
        audit_command.check_audit_flags(executor, gpu, device, candidate, definition)
        request = audit_command.AuditRequest(
            solutions=names,
            runtime=runtime_choice(runtime, "pick"),
            out=out,
            candidate=candidate,
            definition=definition,
            gpus=gpu,
            device=device,
            env=env,
            over=over,
            substitute=substitute,
            workload_timeout_s=finite_seconds(timeout, "--timeout"),
            resume=resume,
            gpu_wait_s=gpu_wait,
            suite=suite,
            each_gpu=each_gpu,
            cpu_jobs=cpu_jobs,
            data_root=data_root,
            solutions_root=solutions_root,
            locks_dir=locks_dir,
            evaluation=evaluation,
            slurm=slurm if executor == "slurm" else None,
        )
        with audit_progress() as progress:
            echo = (lambda text: typer.echo(text, err=True)) if as_json else typer.echo
            result = audit_command.audit(request, echo, make_env, progress)
    if as_json:
        fields = ("report", "statuses", "superseded", "errors", "failed")
        typer.echo(json_text({name: getattr(result, name) for name in fields}))
    else:
        print_audit_summary(result)
    raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)
