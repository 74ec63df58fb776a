"""Which environments a `build` names: a solution's declared env, an env named directly, or
every env the shipped solutions declare."""

from __future__ import annotations

from pathlib import Path

from envaudit.errors import EnvauditError
from envaudit.runtime.jobs import find_solution


def declared_envs(solutions_root: Path) -> dict[str, list[str]]:
    """env -> the solutions that declare it."""
    found: dict[str, list[str]] = {}
    for path in sorted(solutions_root.glob("*/solution.json")):
        _, solution = find_solution(path.parent.name, solutions_root)
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
    if sum([solution is not None, env is not None, all_envs]) != 1:
        raise EnvauditError("name exactly one of --solution S, --env E or --all")
    if all_envs:
        return sorted(declared_envs(solutions_root))
    if env is not None:
        return [env]
    assert solution is not None
    if (solutions_root / solution / "solution.json").is_file() or Path(solution).is_file():
        _, found = find_solution(solution, solutions_root)
        if not found.env:
            raise EnvauditError(
                f"solution {solution} declares no environment", hint="build one with --env ENV"
            )
        return [found.env]
    if (locks_dir / solution / "env.toml").is_file():
        return [solution]  # an env name: the image every solution declaring it runs in
    known = sorted(p.parent.name for p in solutions_root.glob("*/solution.json"))
    envs = sorted(p.parent.name for p in locks_dir.glob("*/env.toml"))
    raise EnvauditError(
        f"--solution {solution}: no solution or environment of that name",
        hint=f"environments: {', '.join(envs)}; solutions: {len(known)} under {solutions_root}/",
    )
