"""Find a lock by what a result line or a person names it: an env of locks/, a lock.json file,
or a closure hash, looked up in the current locks and then in git history.

A result line names the closure it ran in; the lock may have moved on since (a version bump, a
rebuilt wheel). The commit whose locks/<env>/lock.json carries that closure hash still describes
it exactly, so `diff-env` and `reproduce` read the lock from there. git's pickaxe (`log -S`)
finds the commits that added or removed the hash without reading every revision. A line run
over a declared substitute base names that substitute's closure, kept beside the env's lock in
locks/<env>/substitutes/<name>.json: those files are searched alike, now and in history.
"""

from __future__ import annotations

import io
import re
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from envaudit.errors import EXIT_FAILED, EXIT_USAGE, EnvauditError
from envaudit.schema.locks import Lock
from envaudit.schema.reading import UnreadableFile, loads_json, read_text

HASH_PREFIX = re.compile(r"^[0-9a-f]{8,64}$")


class LockNotFound(EnvauditError):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message, EXIT_USAGE, hint=hint)


@dataclass(frozen=True)
class FoundLock:
    lock: Lock
    origin: str
    """Where it was read: a path, or `<commit>:<path>` for a lock from git history."""
    env_toml: str | None = None
    """The env.toml beside it, when there is one (for its declared requirements)."""


def find_lock(ref: str, locks_dir: Path = Path("locks")) -> FoundLock:
    """`ref` as an env name, a lock.json path, or a closure hash (or a prefix of 8+ digits)."""
    path = Path(ref)
    if path.is_file():
        return _from_file(path)
    if (locks_dir / ref / "lock.json").is_file():
        return _from_file(locks_dir / ref / "lock.json")
    if HASH_PREFIX.match(ref):
        return _by_closure(ref, locks_dir)
    known = sorted(p.parent.name for p in locks_dir.glob("*/lock.json"))
    raise LockNotFound(
        f"{ref!r} is no lock.json file, no env of {locks_dir}/ and no closure hash",
        hint=f"envs: {', '.join(known) or 'none'}; a closure hash needs 8 or more hex digits",
    )


class EditedLock(EnvauditError):
    """A lock.json whose recorded closure hash is not its content's (exit 1)."""


LOCK_FILES = ("*/lock.json", "*/substitutes/*.json")
"""Where locks are, under a locks folder: each env's own, and its substitute bases' closures."""
LOCK_PATHSPECS = ("*lock.json", "*/substitutes/*.json")
"""The same, as git pathspecs from the repository root (`*` crosses folders there)."""


def lock_files(locks_dir: Path) -> list[Path]:
    """Every lock file of a locks folder (LOCK_FILES), sorted."""
    return sorted(path for pattern in LOCK_FILES for path in locks_dir.glob(pattern))


def env_folder(path: Path) -> Path:
    """The env folder of a lock file: its own folder, or, for a substitute base's closure
    (<env>/substitutes/<name>.json), the folder above."""
    return path.parent.parent if path.parent.name == "substitutes" else path.parent


def _from_file(path: Path) -> FoundLock:
    """A lock.json given as a file (and its env's env.toml); LockNotFound (exit 2) naming
    the file when it is no text (binary bytes, a device) or no lock."""
    toml = env_folder(path) / "env.toml"
    try:
        text = read_text(path)
        env_toml = read_text(toml) if toml.is_file() else None
    except UnreadableFile as exc:
        raise LockNotFound(f"{exc}; not a lock.json", hint="name a lock.json file") from None
    except OSError as exc:
        raise LockNotFound(f"{path}: cannot be read: {exc.strerror or exc}") from None
    lock = _parse(text, str(path))
    actual = lock.computed_closure_hash()
    if actual != lock.closure_hash:  # as `lock --check` refuses it: its hash names other content
        raise EditedLock(
            f"{path}: closure_hash {lock.closure_hash} does not match the content ({actual}):"
            " the file was edited by hand",
            EXIT_FAILED,
            hint="regenerate it with `envaudit lock ENV`, or give the lock as committed",
        )
    return FoundLock(lock, str(path), env_toml)


def _parse(text: str, origin: str) -> Lock:
    try:
        return Lock.model_validate(loads_json(text, origin))
    except (ValueError, ValidationError) as exc:
        raise LockNotFound(f"{origin} is not a lock.json: {str(exc).splitlines()[0]}") from None


def _by_closure(prefix: str, locks_dir: Path) -> FoundLock:
    for path in lock_files(locks_dir):
        try:
            current = _from_file(path)
        except EditedLock:
            continue  # its recorded hash names other content: never found by it
        if current.lock.closure_hash.startswith(prefix):
            return current
    root = git_root(locks_dir)
    found = _from_history(prefix, root) if root is not None else None
    if found is not None:
        return found
    raise LockNotFound(
        f"no lock with closure hash {prefix} in {locks_dir}/ or in its git history",
        hint="the line was measured in an environment this repository never committed",
    )


def _from_history(prefix: str, root: Path) -> FoundLock | None:
    for commit in _commits_touching(prefix, root):
        for name in _files_holding(commit, prefix, root):
            lock = _parse(git_show(commit, name, root), f"{commit[:12]}:{name}")
            if lock.closure_hash.startswith(prefix):
                toml = git_show(commit, str(env_folder(Path(name)) / "env.toml"), root, True)
                return FoundLock(lock, f"{commit[:12]}:{name}", toml or None)
    return None


def run_git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def git_root(folder: Path) -> Path | None:
    """The repository holding `folder` (None outside one: no history to search)."""
    if not folder.is_dir():
        return None
    result = run_git("rev-parse", "--show-toplevel", cwd=folder)
    return Path(result.stdout.strip()) if result.returncode == 0 else None


def _commits_touching(text: str, root: Path) -> list[str]:
    """Commits (newest first) that add or remove `text` in some lock file."""
    result = run_git("log", "--all", "-S", text, "--format=%H", "--", *LOCK_PATHSPECS, cwd=root)
    return result.stdout.split() if result.returncode == 0 else []


def _files_holding(commit: str, text: str, root: Path) -> list[str]:
    """Paths (from the repository root) of the lock files of `commit` containing text."""
    result = run_git("grep", "-l", "-F", text, commit, "--", *LOCK_PATHSPECS, cwd=root)
    if result.returncode != 0:
        return []
    return [line.split(":", 1)[1] for line in result.stdout.splitlines() if ":" in line]


def git_show(commit: str, path: str, root: Path, missing_ok: bool = False) -> str:
    return git_bytes(commit, path, root, missing_ok).decode()


def git_bytes(commit: str, path: str, root: Path, missing_ok: bool = False) -> bytes:
    """A file as it was at `commit`, byte for byte (no newline translation: source hashes are
    over bytes); b"" when it is absent and `missing_ok`."""
    done = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=root, capture_output=True, check=False
    )
    if done.returncode != 0:
        if missing_ok:
            return b""
        message = done.stderr.decode(errors="replace").strip()
        raise LockNotFound(f"git cannot read {path} at {commit[:12]}: {message}")
    return done.stdout


def git_export(commit: str, path: str, root: Path, dest: Path) -> Path:
    """The folder `path` (from the repository root) as it was at `commit`, written under dest
    (dest/path); what `reproduce` builds an old lock or runs an old solution revision from."""
    done = subprocess.run(
        ["git", "archive", "--format=tar", commit, "--", path],
        cwd=root,
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise LockNotFound(f"git cannot export {path} at {commit[:12]}: {message}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(dest, filter="data")
    return dest / path


def stand_in_notes(
    closures: Iterable[str], locks_dir: Path = Path("locks")
) -> dict[str, list[str]]:
    """closure hash -> what its lock builds in place of unreachable historical pins (FlashMLA
    9241ae3e for the audit's 0f11e178), so a report says whose figures these are; a closure the
    locks have moved on from is read from git history, as `reproduce` does. Locks that do not
    parse are skipped here: `envaudit lock --check` is where they are refused."""
    wanted = set(closures)
    locks: dict[str, Lock] = {}
    for path in lock_files(locks_dir):
        try:
            lock = _from_file(path).lock
        except (LockNotFound, EditedLock):
            continue
        if lock.closure_hash in wanted:
            locks[lock.closure_hash] = lock
    root = git_root(locks_dir)
    for closure in sorted(wanted - set(locks)):
        if root is None or not HASH_PREFIX.match(closure):
            continue
        try:
            found = _from_history(closure, root)
        except LockNotFound:
            continue
        if found is not None:
            locks[closure] = found.lock
    notes = {c: [n for n in (s.stand_in() for s in lock.sources) if n] for c, lock in locks.items()}
    return {c: found for c, found in sorted(notes.items()) if found}
