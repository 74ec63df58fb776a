"""Reading and writing locks/<env>/{env.toml,lock.json} with precise messages."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from pydantic import ValidationError

from envaudit.errors import EXIT_FAILED, EnvauditError
from envaudit.schema.locks import EnvSpec, Lock
from envaudit.schema.names import name_problem, shown
from envaudit.schema.paths import write_text_atomically

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
    path = folder / "env.toml"
    try:
        raw = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise LockError(f"{path}: cannot read: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise LockError(f"{path}: not UTF-8 text: {exc}", exit_code=EXIT_FAILED) from exc
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{path}: not valid TOML: {exc}", exit_code=EXIT_FAILED) from exc
    try:
        return EnvSpec.model_validate(raw)
    except ValidationError as exc:
        raise LockError(f"{path}: {_describe(exc)}", exit_code=EXIT_FAILED) from exc


def load_lock(folder: Path) -> Lock:
    """lock.json, refused when its closure_hash does not match its content (edited by hand)."""
    path = folder / "lock.json"
    if not path.is_file():
        raise LockError(
            f"{path} does not exist",
            exit_code=EXIT_FAILED,
            hint=f"run `envaudit lock {folder.name}`",
        )
    try:
        lock = Lock.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:
        detail = _describe(exc) if isinstance(exc, ValidationError) else str(exc)
        raise LockError(f"{path}: {detail}", exit_code=EXIT_FAILED) from exc
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
    return write_text_atomically(folder / "lock.json", text)


def _describe(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
