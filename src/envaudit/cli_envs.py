"""The command line's environment commands: locks (lock, fetch, verify-env, diff-env,
upstreams) and images (build, base build). `envaudit.cli` adds them to the one app."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from envaudit.cli_common import (
    FROM_FLAGS,
    DataRoot,
    LocksDir,
    OverOption,
    SolutionsRoot,
    TimeoutOption,
    evaluation_flags,
    finite_seconds,
    parse_path,
    render,
    reported,
    slurm_flags,
    unique_names,
    usage_error,
)
from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError
from envaudit.runtime.scheduling.slurm import SlurmSettings
from envaudit.schema.options import EvalOptions

NO_SLURM = SlurmSettings()
"""Stands for the `slurm` settings `bisect-env` gets from slurm_flags."""

envs_app = typer.Typer()
base_app = typer.Typer(help="Offline base images built from containers/.", no_args_is_help=True)


@envs_app.command()
def lock(
    envs: Annotated[
        list[str] | None, typer.Argument(help="Lock directory names under locks/.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Exit 1 if lock.json is stale or edited. Offline, except that a base.registry"
            " tag is asked for again (not under ENVAUDIT_OFFLINE=1).",
        ),
    ] = False,
    all_envs: Annotated[bool, typer.Option("--all", help="Every env under --locks-dir.")] = False,
    no_build: Annotated[
        bool, typer.Option("--no-build", help="Resolve only; leave unbuilt sources unbuilt.")
    ] = False,
    rebuild: Annotated[
        list[str] | None,
        typer.Option("--rebuild", help="Build this source again (repeatable).", metavar="SOURCE"),
    ] = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """(Re)generate locks/ENV/lock.json from env.toml (uv resolves, sources are built into the
    store); --check verifies it."""
    from envaudit.commands.lock import lock_each

    names = sorted(p.parent.name for p in locks_dir.glob("*/env.toml")) if all_envs else envs
    if all_envs and not names:
        usage_error(f"--all: no environment under {locks_dir} (no */env.toml)", "pass --locks-dir")
    if not names:
        usage_error("name at least one environment, or pass --all")
    if no_build and rebuild:
        usage_error("--rebuild and --no-build contradict each other")
    stale = 0
    with reported():
        for done in lock_each(names, locks_dir, check, not no_build, rebuild):
            stale += done.stale
            for line in done.lines:
                typer.echo(line)
    raise typer.Exit(EXIT_FAILED if stale else EXIT_OK)


@envs_app.command()
def fetch(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    offline: Annotated[bool, typer.Option("--offline", help="Use only the store.")] = False,
    verify: Annotated[
        bool,
        typer.Option("--verify", help="Rehash every store entry (sizes are always checked)."),
    ] = False,
    store: Annotated[
        Path | None, typer.Option("--store", help="Store folder (default: ENVAUDIT_STORE).")
    ] = None,
    find_links: Annotated[
        list[Path] | None, typer.Option("--find-links", help="Also look in this folder.")
    ] = None,
    bases: Annotated[
        bool,
        typer.Option(
            "--bases",
            help="Also keep the base pinned by registry digest in the store (docker save),"
            " for builds where the registry cannot be reached.",
        ),
    ] = False,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Put every artifact of a lock into the content-addressed store, sha256-verified; a bad
    store entry is quarantined and fetched again."""
    from envaudit.console import byte_progress
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.fetch import fetch_lock
    from envaudit.lock.files import LockError, env_dir
    from envaudit.lock.resolve import current_lock

    with reported():
        config = FetchConfig.from_environment(store, find_links, offline=offline)
    try:
        locked = current_lock(env_dir(env, locks_dir))
        with byte_progress() as progress:
            report = fetch_lock(locked, config, progress, verify=verify)
    except LockError as exc:
        render(exc)
    for message in report.quarantined:
        typer.echo(f"quarantined: {message}", err=True)
    for filename, origin in report.fetched:
        typer.echo(f"fetched {filename} ({origin})")
    for message in report.missing:
        typer.echo(f"missing: {message}", err=True)
    for message in report.notes:
        typer.echo(f"note: {message}")
    typer.echo(
        f"{env}: {len(report.present)} already in the store, {len(report.fetched)} fetched,"
        f" {len(report.quarantined)} quarantined, {len(report.missing)} missing;"
        f" store {config.store}"
    )
    base_kept = True
    if bases:
        from envaudit.image.engine import Engine
        from envaudit.image.registry_base import keep_archive
        from envaudit.lock.store import Store

        with reported():
            line, base_kept = keep_archive(
                Engine.connect(), locked, Store(config.store), config.offline, verify
            )
        typer.echo(line, err=not base_kept)
    raise typer.Exit(EXIT_OK if report.complete and base_kept else EXIT_FAILED)


@envs_app.command("verify-env")
def verify_env(
    env: Annotated[str, typer.Argument(help="Lock directory name under locks/.")],
    python: Annotated[
        str | None,
        typer.Option(
            "--python",
            help="Interpreter to inspect (default: this one; with --image, the image's env).",
        ),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="Inspect inside this container image (files hashed in a container of it).",
        ),
    ] = None,
    exact: Annotated[
        bool, typer.Option("--exact", help="Also fail on installed packages not in the lock.")
    ] = False,
    locks_dir: LocksDir = Path("locks"),
    store: Annotated[
        Path | None,
        typer.Option("--store", help="Content-addressed store (default: ENVAUDIT_STORE)."),
    ] = None,
) -> None:
    """Compare an installed environment with a lock; exit 1 on drift."""
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.files import env_dir, load_lock
    from envaudit.lock.verify import compare, installed_distributions, python_version, render

    with reported():
        locked = load_lock(env_dir(env, locks_dir))
        if image is not None:
            from envaudit.image.build import image_distributions

            installed, version = image_distributions(image, python)
        else:
            interpreter = python or sys.executable
            installed, version = installed_distributions(interpreter), python_version(interpreter)
        drift = compare(locked, installed, store or FetchConfig.from_environment().store, version)
    typer.echo(render(drift, exact=exact))
    raise typer.Exit(EXIT_FAILED if drift.failed(exact) else EXIT_OK)


@envs_app.command("diff-env")
def diff_env(
    a: Annotated[str, typer.Argument(help="An env of locks/, a lock.json, or a closure hash.")],
    b: Annotated[str, typer.Argument(help="The same, for the other side.")],
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """What differs between two locks, most likely to matter for a kernel first (Python, CUDA
    toolchain, torch stack, the env's own packages, source builds, build flags, base, the rest);
    a closure hash is looked up in git history too. Exit 0 identical, 1 different."""
    import json

    from envaudit.lock.diff import diff_locks, render_diff
    from envaudit.lock.history import find_lock

    with reported():
        result = diff_locks(find_lock(a, locks_dir), find_lock(b, locks_dir))
    text = json.dumps(result.as_dict(), indent=1) + "\n" if as_json else render_diff(result)
    typer.echo(text, nl=False)
    raise typer.Exit(EXIT_OK if result.identical else EXIT_FAILED)


@envs_app.command("bisect-env")
@evaluation_flags("run")
@slurm_flags()
def bisect_env(
    a: Annotated[str, typer.Argument(help="The good end: an env, a lock.json or a closure hash.")],
    b: Annotated[str, typer.Argument(help="The bad end, the same way.")],
    solution: Annotated[str, typer.Option("--solution", help="The solution to run at each step.")],
    workload: Annotated[
        list[str] | None, typer.Option("--workload", help="Only this workload UUID.")
    ] = None,
    suite: Annotated[str | None, typer.Option("--suite", help="smoke, dev, all, ...")] = None,
    runtime: Annotated[
        str, typer.Option("--runtime", help="local (uv venvs from the store) or docker.")
    ] = "local",
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU UUID (GPU-...).")] = None,
    device: Annotated[str | None, typer.Option("--device", help="`cpu`.")] = None,
    on: Annotated[
        str, typer.Option("--on", help="status (per-workload statuses) or time (B/A ratio).")
    ] = "status",
    threshold: Annotated[
        float, typer.Option("--threshold", help="--on time: percent beyond which it counts.")
    ] = 5.0,
    executor: Annotated[
        str, typer.Option("--executor", help="local, or slurm (each level one job array).")
    ] = "local",
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel", help="Steps per level (1 halves; slurm runs them at once).", min=1
        ),
    ] = 1,
    out: Annotated[
        Path,
        typer.Option("--out", help="Folder for bisect.json and results.jsonl.", parser=parse_path),
    ] = Path("results/bisect"),
    timeout: TimeoutOption = 300.0,
    data_root: DataRoot = Path("workloads"),
    solutions_root: SolutionsRoot = Path("solutions"),
    locks_dir: LocksDir = Path("locks"),
    evaluation: EvalOptions = FROM_FLAGS,
    slurm: SlurmSettings = NO_SLURM,
) -> None:
    """Find the change between two locks that flips a solution's result, as `git bisect` does:
    each step a real lock resolved offline from the store. Exit 0 one group of changes flips
    it, 1 it takes several together, 2 it cannot be attempted (the ends agree, say)."""
    from envaudit.commands.bisect import BisectRequest, bisect_envs, step_table, summary_line
    from envaudit.console import make_env

    if on not in ("status", "time"):
        usage_error(f"--on takes status or time, got {on!r}")
    if executor not in ("local", "slurm"):
        usage_error(f"no executor {executor!r}", "use --executor local or --executor slurm")
    unique_names([solution], "--solution")
    request = BisectRequest(
        good=a,
        bad=b,
        solution=solution,
        workloads=tuple(unique_names(workload, "--workload", plain=False)),
        suite=suite,
        runtime=runtime,
        gpu=gpu,
        device=device,
        on="time" if on == "time" else "status",
        threshold_pct=threshold,
        locks_dir=locks_dir,
        data_root=data_root,
        solutions_root=solutions_root,
        evaluation=evaluation,
        workload_timeout_s=finite_seconds(timeout, "--timeout"),
        slurm=slurm if executor == "slurm" else None,
        width=parallel,
        out=out,
    )
    with reported():
        outcome = bisect_envs(request, make_env, lambda text: typer.echo(text, err=True))
    rows = step_table(outcome)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    typer.echo(summary_line(outcome))
    typer.echo(f"written: {out / 'bisect.json'}, {out / 'results.jsonl'}")
    raise typer.Exit(outcome.exit_code)


@base_app.command("build")
def base_build(
    name: Annotated[str, typer.Argument(help="Base recipe under containers/bases.")],
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Build it even if it exists.")] = False,
) -> None:
    """Build an offline base image (debootstrap rootfs + docker import)."""
    from envaudit.console import status_line
    from envaudit.image.base import build_base, load_recipe
    from envaudit.image.engine import Engine

    started = time.monotonic()
    with reported(), status_line(f"debootstrap of {name}") as status:
        recipe = load_recipe(name)
        image, built = build_base(Engine.connect(), recipe, status, rebuild=rebuild)
    verb = "built" if built else "already built"
    manifest = image.labels.get("dev.envaudit.base-manifest-sha256", "?")
    typer.echo(
        f"{recipe.tag}: {verb} in {time.monotonic() - started:.1f} s; image {image.id[:19]},"
        f" {image.size / 1e6:.0f} MB, package manifest sha256 {manifest}"
    )


@envs_app.command()
def build(
    solution: Annotated[
        str | None,
        typer.Option("--solution", help="A solution, or an env name (its solutions' image)."),
    ] = None,
    env: Annotated[str | None, typer.Option("--env", help="An env under locks/.")] = None,
    all_envs: Annotated[
        bool, typer.Option("--all", help="Every env a shipped solution declares.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the Dockerfile and staged files only.")
    ] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Rebuild every step.")] = False,
    offline: Annotated[
        bool,
        typer.Option(
            "--offline",
            help="Pull nothing: a base pinned by registry digest comes from the store's archive"
            " (fetch --bases).",
        ),
    ] = False,
    over: OverOption = None,
    locks_dir: LocksDir = Path("locks"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Build one image per lock, tagged by closure hash; a no-op when it exists."""
    from envaudit.commands.build import build_each, build_over, envs_to_build, plan_builds
    from envaudit.console import build_steps, built_line, planned_build, status_line

    unique_names([solution] if solution is not None else [], "--solution")
    with reported():
        envs = envs_to_build(solution, env, all_envs, locks_dir, solutions_root)
        plans = plan_builds(envs, locks_dir)
    if over is not None and not dry_run:
        with reported(), status_line(f"over {over}") as on_line:
            for done, verified in build_over(envs, over, locks_dir, no_cache, on_line):
                base = f"; base verified: {verified}" if verified else ""
                typer.echo(built_line(done, gigabytes=True) + base)
        raise typer.Exit(EXIT_OK)
    if dry_run:
        for plan in plans:
            typer.echo(planned_build(plan))
        raise typer.Exit(EXIT_OK)
    failed = 0
    with reported():
        for plan, outcome in build_each(plans, no_cache, build_steps, offline):
            if isinstance(outcome, EnvauditError) and len(plans) == 1:
                raise outcome
            if isinstance(outcome, EnvauditError):
                failed += 1
                typer.echo("\n".join(outcome.rendered(plan.image.env)), err=True)
            else:
                typer.echo(built_line(outcome))
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


@envs_app.command()
def upstreams(
    offline: Annotated[
        bool, typer.Option("--offline", help="Ask nothing; list every pin as not checked.")
    ] = False,
    locks_dir: Annotated[Path, typer.Option("--locks-dir", help="Folder of lock dirs.")] = Path(
        "locks"
    ),
    out: Annotated[
        Path, typer.Option("--out", help="Report file (JSON).", parser=parse_path)
    ] = Path("results/upstreams.json"),
) -> None:
    """Pinned versions and commits vs what registries and remotes have now."""
    from envaudit.console import progress_bar
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.upstreams import check_upstreams, render, write_upstreams

    with reported():
        config = FetchConfig.from_environment(offline=offline)
        with progress_bar("asking the index and git remotes", quiet=offline) as progress:
            report = check_upstreams(locks_dir, config, offline, progress)
        write_upstreams(report, out)
    typer.echo(render(report))
    typer.echo(f"written to {out}")
