"""`envaudit lock`: each env's lock made again from its env.toml (uv resolves, sources are
built into the store), or, with `check`, each lock checked against its env.toml offline."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from envaudit.errors import EXIT_FAILED
from envaudit.lock.build import lock_and_build
from envaudit.lock.config import FetchConfig
from envaudit.lock.files import LockError, env_dir, load_spec, write_lock
from envaudit.lock.resolve import stale_reasons


@dataclass
class EnvLocked:
    """What became of one env: its lines of output, and whether its lock is stale (or was
    refused) under `--check`."""

    env: str
    lines: list[str] = field(default_factory=list)
    stale: bool = False


def lock_each(
    names: list[str],
    locks_dir: Path,
    check: bool,
    build: bool,
    rebuild: list[str] | None,
    substitute: str | None = None,
) -> Iterator[EnvLocked]:
    """Each closure in turn: an env's declared one, then each declared substitute base's
    (`substitute`: that one only). Under `check`, a lock refused as the lock's own fault
    (exit 1: edited, unreadable) counts as stale and the next is checked; any other error is
    raised."""
    for name in names:
        for which in _closures(name, locks_dir, substitute):
            label = f"{name} over {which}" if which else name
            try:
                yield (
                    _check(name, label, locks_dir, which)
                    if check
                    else _lock(name, label, locks_dir, build, rebuild, which)
                )
            except LockError as exc:
                if not (check and exc.exit_code == EXIT_FAILED):
                    raise
                yield EnvLocked(name, [f"{label}: refused: {exc}"], stale=True)


def _closures(name: str, locks_dir: Path, substitute: str | None) -> list[str | None]:
    """None (the declared base's closure) and the names of the declared substitutes, or only
    the substitute asked for."""
    if substitute is not None:
        return [substitute]
    spec = load_spec(env_dir(name, locks_dir))
    return [None, *(s.name for s in spec.substitutes)]


def _check(name: str, label: str, locks_dir: Path, substitute: str | None) -> EnvLocked:
    reasons = stale_reasons(env_dir(name, locks_dir), substitute=substitute)
    status = "stale: " + "; ".join(reasons) if reasons else "current"
    return EnvLocked(name, [f"{label}: {status}"], stale=bool(reasons))


def _lock(
    name: str,
    label: str,
    locks_dir: Path,
    build: bool,
    rebuild: list[str] | None,
    substitute: str | None,
) -> EnvLocked:
    folder = env_dir(name, locks_dir)
    sealed, messages = lock_and_build(
        folder, FetchConfig.from_environment(), build=build, rebuild=rebuild, substitute=substitute
    )
    path = write_lock(folder, sealed)
    done = f"{len(sealed.packages)} packages, closure {sealed.closure_hash[:16]} -> {path}"
    return EnvLocked(name, [f"{label}: {message}" for message in [*messages, done]])
