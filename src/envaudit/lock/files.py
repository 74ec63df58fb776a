"""Reading and writing locks/<env>/{env.toml,lock.json} with precise messages."""

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


def load_spec(folder: Path) -> EnvSpec:
    """env.toml; an unreadable or unparsable one is an environment error (exit 2, no lock can
    be made or checked from it), one that breaks the schema the env's own fault (exit 1)."""
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


def load_lock(folder: Path) -> Lock:
    """lock.json, refused when its closure_hash does not match its content (edited by hand:
    exit 1); a missing, unreadable or unparsable one is an environment error (exit 2)."""
    path = folder / "lock.json"
    if not path.is_file():
        raise LockError(f"{path} does not exist", hint=f"run `envaudit lock {folder.name}`")
    try:
        raw = load_json(path)
    except OSError as exc:
        raise LockError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except ValueError as exc:  # not UTF-8, not JSON, nested too deeply
        hint = f"regenerate it with `envaudit lock {folder.name}`"
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
            hint=f"regenerate it with `envaudit lock {folder.name}`",
        )
    return lock


def write_lock(folder: Path, lock: Lock) -> Path:
    """Atomically replace lock.json (temp file in the same folder, then rename)."""
    text = json.dumps(lock.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
    return replace_text(folder / "lock.json", text)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
