"""`envaudit build`: which envs a build names, and one image per env from its lock (or over an
imported machine stack), each env's failure kept apart from the others'."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from envaudit.dataset.solutions import index_solutions
from envaudit.errors import EnvauditError
from envaudit.image.build import BuildPlan as BuildPlan
from envaudit.image.build import BuildResult as BuildResult
from envaudit.image.build import build_image, build_overlay, plan_build
from envaudit.image.engine import Engine
from envaudit.lock.config import FetchConfig
from envaudit.runtime.jobs import find_solution

StepCallbacks = tuple[Callable[[int, int, str], None], Callable[[str], None]]
"""(on_step, on_line): a build's progress over its Dockerfile's steps, and its base's lines."""


def declared_envs(solutions_root: Path) -> dict[str, list[str]]:
    """env -> the solutions that declare it."""
    found: dict[str, list[str]] = {}
    for name in index_solutions([solutions_root]).names():
        _, solution = find_solution(name, solutions_root)
        if solution.env:
            found.setdefault(solution.env, []).append(solution.name)
    return found


def envs_to_build(
    solution: str | None,
    env: str | None,
    all_envs: bool,
    locks_dir: Path,
    solutions_root: Path,
) -> list[str]:
    """The envs `--solution` (a solution's declared env, or an env's name), `--env` or `--all`
    (every env a shipped solution declares) names."""
    if sum([solution is not None, env is not None, all_envs]) != 1:
        raise EnvauditError("name exactly one of --solution S, --env E or --all")
    if all_envs:
        return sorted(declared_envs(solutions_root))
    if env is not None:
        return [env]
    assert solution is not None
    index = index_solutions([solutions_root])
    if index.find(solution) is not None or Path(solution).is_file():
        _, found = find_solution(solution, solutions_root)
        if not found.env:
            raise EnvauditError(
                f"solution {solution} declares no environment", hint="build one with --env ENV"
            )
        return [found.env]
    if (locks_dir / solution / "env.toml").is_file():
        return [solution]  # an env name: the image every solution declaring it runs in
    known = index.files
    envs = sorted(p.parent.name for p in locks_dir.glob("*/env.toml"))
    raise EnvauditError(
        f"--solution {solution}: no solution or environment of that name",
        hint=f"environments: {', '.join(envs)}; solutions: {len(known)} under {solutions_root}/",
    )


def plan_builds(
    envs: list[str], locks_dir: Path, substitute: str | None = None, over: str | None = None
) -> list[BuildPlan]:
    """Each env's build plan; with `substitute`, of that declared substitute base's closure
    (one env only: a substitute is a declaration of one env.toml)."""
    if substitute is not None and len(envs) != 1:
        raise EnvauditError(
            f"--substitute-base {substitute} names a substitute one env declares: build one env"
            f" with it (--solution S or --env E), not {len(envs)}"
        )
    if substitute is not None and over is not None:
        raise EnvauditError(
            f"--substitute-base {substitute} and --over {over} name two different bases: choose one"
        )
    return [plan_build(name, locks_dir, substitute) for name in envs]


def build_each(
    plans: list[BuildPlan],
    no_cache: bool,
    progress: Callable[[str], AbstractContextManager[StepCallbacks]],
    offline: bool = False,
) -> Iterator[tuple[BuildPlan, BuildResult | EnvauditError]]:
    """Each plan's image, built or found, or the error that stopped it; one env's failure
    does not stop the next. An engine that does not answer is raised before the first.
    `offline` (or ENVAUDIT_OFFLINE=1): a base pinned by registry digest is never pulled, only
    loaded from the store's archive (`fetch --bases`)."""
    engine = Engine.connect()
    config = FetchConfig.from_environment(offline=offline)
    for plan in plans:
        outcome: BuildResult | EnvauditError
        try:
            with progress(plan.image.env) as (on_step, on_line):
                outcome = build_image(plan, engine, config, no_cache, on_step, on_line)
        except EnvauditError as exc:
            outcome = exc
        yield plan, outcome


def build_over(
    envs: list[str],
    over: str,
    locks_dir: Path,
    no_cache: bool,
    on_line: Callable[[str], None],
) -> Iterator[tuple[BuildResult, dict[str, Any] | None]]:
    """Each env's image over the imported stack `over`, with how its base was verified (None
    when the image was already there)."""
    engine = Engine.connect()
    config = FetchConfig.from_environment()
    for name in envs:
        done, overlay = build_overlay(name, over, engine, config, locks_dir, no_cache, on_line)
        yield done, overlay.verified if overlay else None
