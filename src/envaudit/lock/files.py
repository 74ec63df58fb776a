"""Reading and writing locks/<env>/{env.toml,lock.json} with precise messages; a declared
substitute base's closure is locks/<env>/substitutes/<name>.json (schema/locks.py,
SubstituteSpec)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pydantic import ValidationError

from envaudit.errors import EXIT_FAILED, EnvauditError
from envaudit.schema.locks import EnvSpec, Lock
from envaudit.schema.names import name_problem, shown
from envaudit.schema.reading import UnreadableFile, load_json, loads_toml, read_text
from envaudit.schema.writes import replace_text

LOCKS_DIR = Path("locks")
SUBSTITUTES = "substitutes"


class LockError(EnvauditError):
    """A lock or env.toml is missing, malformed, stale or refused. `exit_code` follows the
    command contract: 1 when the audited thing (the lock, the environment) is wrong, 2 for
    usage or environment errors."""


def env_dir(env: str, locks_dir: Path = LOCKS_DIR) -> Path:
    """locks_dir/env, refused (exit 2) unless `env` is a plain name with an env.toml there."""
    problem = name_problem(env)
    folder = locks_dir / env
    if problem is not None or not (folder / "env.toml").is_file():
        known = sorted(p.parent.name for p in locks_dir.glob("*/env.toml"))
        raise LockError(
            f"{shown(env)} is not an environment name: {problem}"
            if problem
            else f"no environment {env!r}: {folder / 'env.toml'} does not exist",
            hint=f"known environments: {', '.join(known) or 'none'}",
        )
    return folder


def lock_path(folder: Path, substitute: str | None = None) -> Path:
    """The declared closure's lock.json, or a substitute base's."""
    if substitute is None:
        return folder / "lock.json"
    return folder / SUBSTITUTES / f"{substitute}.json"


def lock_command(folder: Path, substitute: str | None = None) -> str:
    """The command that (re)makes this lock."""
    asked = f" --substitute-base {substitute}" if substitute is not None else ""
    return f"envaudit lock {folder.name}{asked}"


def load_spec(folder: Path, substitute: str | None = None) -> EnvSpec:
    """env.toml (with `substitute`, the spec that substitute's closure is resolved from); an
    unreadable or unparsable one is an environment error (exit 2, no lock can be made or
    checked from it), one that breaks the schema the env's own fault (exit 1); a substitute
    env.toml does not declare is a usage error (exit 2)."""
    spec = _load_spec(folder)
    if substitute is None:
        return spec
    try:
        return spec.for_substitute(substitute)
    except KeyError:
        declared = ", ".join(s.name for s in spec.substitutes) or "none"
        raise LockError(
            f"{folder / 'env.toml'} declares no substitute base {substitute!r} (declared:"
            f" {declared})",
            hint="name one of its [[substitutes]], or declare one there and lock it",
        ) from None


def _load_spec(folder: Path) -> EnvSpec:
    path = folder / "env.toml"
    try:
        raw = loads_toml(read_text(path), str(path))
    except OSError as exc:
        raise LockError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnreadableFile as exc:  # a device, binary bytes, nested too deeply
        raise LockError(str(exc), hint=f"{path} must be a TOML text file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{path}: not valid TOML: {exc}") from exc
    try:
        return EnvSpec.model_validate(raw)
    except ValidationError as exc:
        raise LockError(f"{path}: {_describe(exc)}", exit_code=EXIT_FAILED) from exc


def load_lock(folder: Path, substitute: str | None = None) -> Lock:
    """lock.json (with `substitute`, that substitute base's closure), refused when its
    closure_hash does not match its content (edited by hand: exit 1) or it is another
    closure than the one asked for; a missing, unreadable or unparsable one is an environment
    error (exit 2)."""
    path = lock_path(folder, substitute)
    command = lock_command(folder, substitute)
    if not path.is_file():
        raise LockError(f"{path} does not exist", hint=f"run `{command}`")
    try:
        raw = load_json(path)
    except OSError as exc:
        raise LockError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not UTF-8, not JSON, nested too deeply
        hint = f"regenerate it with `{command}`"
        raise LockError(f"{path}: not a lock.json: {exc}", hint=hint) from exc
    try:
        lock = Lock.model_validate(raw)
    except ValidationError as exc:
        raise LockError(f"{path}: {_describe(exc)}", exit_code=EXIT_FAILED) from exc
    actual = lock.computed_closure_hash()
    if actual != lock.closure_hash:
        raise LockError(
            f"{path}: closure_hash {lock.closure_hash} does not match the content"
            f" ({actual}): the file was edited by hand",
            exit_code=EXIT_FAILED,
            hint=f"regenerate it with `{command}`",
        )
    found = lock.substitute.name if lock.substitute is not None else None
    if found != substitute:

        def named(name: str | None) -> str:
            return f"substitute base {name}'s closure" if name else "the declared closure"

        raise LockError(
            f"{path} holds {named(found)}, not {named(substitute)}",
            exit_code=EXIT_FAILED,
            hint=f"regenerate it with `{command}`",
        )
    return lock


def write_lock(folder: Path, lock: Lock) -> Path:
    """Atomically replace lock.json, or a substitute's closure file (temp file in the same
    folder, then rename)."""
    path = lock_path(folder, lock.substitute.name if lock.substitute is not None else None)
    path.parent.mkdir(exist_ok=True)
    text = json.dumps(lock.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
    return replace_text(path, text)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
