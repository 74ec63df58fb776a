"""The command line's environment commands: locks (lock, fetch, verify-env, diff-env,
upstreams) and images (build, base build). `envaudit.cli` adds them to the one app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envaudit.cli_common import (
    FROM_FLAGS,
    DataRoot,
    JsonOption,
    LocksDir,
    OverOption,
    SolutionsRoot,
    SubstituteOption,
    ThresholdOption,
    TimeoutOption,
    evaluation_flags,
    finite_seconds,
    json_text,
    parse_path,
    reported,
    slurm_flags,
    unique_names,
    usage_error,
)
from envaudit.errors import EXIT_FAILED, EXIT_OK, EnvauditError
from envaudit.schema.options import EvalOptions
from envaudit.schema.slurm import SlurmSettings

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
    substitute: SubstituteOption = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """(Re)generate locks/ENV/lock.json and each declared substitute base's closure
    (locks/ENV/substitutes/NAME.json) from env.toml (uv resolves, sources are built into the
    store); --check verifies them."""
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
        for done in lock_each(names, locks_dir, check, not no_build, rebuild, substitute):
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
    build: Annotated[
        bool,
        typer.Option(
            "--build",
            help="Build the lock's sources whose recorded wheel no store, mirror or index holds,"
            " from the sources it records; exit 1 where a build makes another wheel.",
        ),
    ] = False,
    substitute: SubstituteOption = None,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """Put every artifact of a lock into the content-addressed store, sha256-verified; a bad
    store entry is quarantined and fetched again."""
    from envaudit.commands.fetch import FetchRequest, fetch_artifacts, keep_base
    from envaudit.console import byte_progress

    request = FetchRequest(
        env,
        locks_dir=locks_dir,
        offline=offline,
        verify=verify,
        store=store,
        find_links=find_links,
        substitute=substitute,
        build=build,
    )
    with reported():
        fetched = fetch_artifacts(request, byte_progress)
    for message in fetched.quarantined:
        typer.echo(f"quarantined: {message}", err=True)
    for filename, origin in fetched.fetched:
        typer.echo(f"fetched {filename} ({origin})")
    for message in fetched.missing:
        typer.echo(f"missing: {message}", err=True)
    for message in fetched.notes:
        typer.echo(f"note: {message}")
    typer.echo(
        f"{env}: {fetched.present} already in the store, {len(fetched.fetched)} fetched,"
        f" {len(fetched.quarantined)} quarantined, {len(fetched.missing)} missing;"
        f" store {fetched.store}"
    )
    base_kept = True
    if bases:
        with reported():
            kept = keep_base(fetched, verify)
        typer.echo(kept.line, err=not kept.kept)
        base_kept = kept.kept
    raise typer.Exit(EXIT_OK if fetched.complete and base_kept else EXIT_FAILED)


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
    substitute: SubstituteOption = None,
    as_json: JsonOption = False,
) -> None:
    """Compare an installed environment with a lock; exit 1 on drift."""
    from envaudit.commands.verify_env import VerifyRequest, verify_environment

    with reported():
        result = verify_environment(
            VerifyRequest(
                env,
                python=python,
                image=image,
                exact=exact,
                locks_dir=locks_dir,
                store=store,
                substitute=substitute,
            )
        )
    if as_json:
        answer = {"env": env, "exact": exact, "failed": result.failed, "drift": result.drift}
        typer.echo(json_text(answer))
    else:
        typer.echo(result.text())
    raise typer.Exit(EXIT_FAILED if result.failed else EXIT_OK)


@envs_app.command("diff-env")
def diff_env(
    a: Annotated[str, typer.Argument(help="An env of locks/, a lock.json, or a closure hash.")],
    b: Annotated[str, typer.Argument(help="The same, for the other side.")],
    as_json: JsonOption = False,
    locks_dir: LocksDir = Path("locks"),
) -> None:
    """What differs between two locks, most likely to matter for a kernel first (Python, CUDA
    toolchain, torch stack, the env's own packages, source builds, build flags, base, the rest);
    a closure hash is looked up in git history too. Exit 0 identical, 1 different."""
    from envaudit.commands.diff_env import DiffRequest, diff_envs

    with reported():
        result = diff_envs(DiffRequest(a, b, locks_dir=locks_dir))
    typer.echo(result.json_text() if as_json else result.text(), nl=False)
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
    threshold: ThresholdOption = 0.0,
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
    from envaudit.commands.base import BaseBuildRequest, build_base_image
    from envaudit.console import status_line

    with reported(), status_line(f"debootstrap of {name}") as status:
        done = build_base_image(BaseBuildRequest(name, rebuild=rebuild), status)
    verb = "built" if done.built else "already built"
    typer.echo(
        f"{done.tag}: {verb} in {done.seconds:.1f} s; image {done.image_id[:19]},"
        f" {done.size_bytes / 1e6:.0f} MB, package manifest sha256 {done.manifest}"
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
    substitute: SubstituteOption = None,
    locks_dir: LocksDir = Path("locks"),
    solutions_root: SolutionsRoot = Path("solutions"),
) -> None:
    """Build one image per lock, tagged by closure hash; a no-op when it exists."""
    from envaudit.commands.build import build_each, build_over, envs_to_build, plan_builds
    from envaudit.console import build_steps, built_line, planned_build, status_line

    unique_names([solution] if solution is not None else [], "--solution")
    with reported():
        envs = envs_to_build(solution, env, all_envs, locks_dir, solutions_root)
        plans = plan_builds(envs, locks_dir, substitute, over)
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
    from envaudit.commands.upstreams import UpstreamsRequest, check_pins
    from envaudit.console import progress_bar

    request = UpstreamsRequest(locks_dir=locks_dir, out=out, offline=offline)
    with reported():
        result = check_pins(
            request, lambda: progress_bar("asking the index and git remotes", quiet=offline)
        )
    typer.echo(result.text())
    typer.echo(f"written to {result.written}")
