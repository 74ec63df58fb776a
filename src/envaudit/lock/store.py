"""The content-addressed store: `<store>/sha256/<hash>` holds a file only once its hash checked out.

Downloads grow in `<store>/partial/<hash>.part` (kept between runs, so an interrupted download
resumes) and are renamed into place after verification. Any number of processes may fetch into
one store at once: a fetch holds the artifact's lock (`<store>/partial/<hash>.lock`, an advisory
`flock`) while it checks the entry, grows the partial file or moves an entry, so one process
brings each file and the others find it there. Every entry is only ever replaced whole (a
rename) by a verified file. An entry that `fetch` finds not to be what its hash says (wrong
size; wrong sha256 when rehashed) is moved aside into `<store>/quarantine/`, not trusted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path

from envaudit.errors import EXIT_FAILED
from envaudit.lock.files import LockError
from envaudit.schema.locks import Artifact
from envaudit.schema.paths import exclusive_lock, sha256_file

SHARED_FILE = 0o644
SHARED_FOLDER = 0o755


def shared_folder(folder: Path) -> Path:
    """Make `folder` (and any missing parents) and open it to every user: the store's entries
    and wheelhouses are read by a container's non-root user and by installers run as another
    user, so the fetching user's umask must not make them private. A folder of another
    owner (a store shared by a group) is left as its owner set it."""
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        folder.chmod(SHARED_FOLDER)
    return folder


DAMAGE_SIGNS = (
    "uncompressed size",
    "failed to extract",
    "decompression",
    "hash mismatch",
    "crc",
    "invalid zip",
)
"""How uv words an archive that is not what it should be, in lower case."""


def damaged_entry_hint(text: str, env: str | None) -> str | None:
    """The hint for an installer failure that reads like a damaged archive: a store entry of
    the right size and other bytes (sizes are checked on every use, content only by
    `fetch --verify`, which rehashes every entry and moves damaged ones aside)."""
    if not any(sign in text.lower() for sign in DAMAGE_SIGNS):
        return None
    return (
        f"a store entry may be damaged (right size, other bytes): run `envaudit fetch"
        f" {env or 'ENV'} --verify` to rehash its entries and fetch damaged ones again"
    )


class HashMismatch(LockError):
    def __init__(self, what: str, artifact: Artifact, actual: str, origin: str) -> None:
        super().__init__(
            f"{what}: {artifact.filename} from {origin} has sha256 {actual}, the lock says"
            f" {artifact.sha256}; refused",
            exit_code=EXIT_FAILED,
        )


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, artifact: Artifact) -> Path:
        return self.root / "sha256" / artifact.sha256

    def partial_path(self, artifact: Artifact) -> Path:
        return self.root / "partial" / f"{artifact.sha256}.part"

    def has(self, artifact: Artifact) -> bool:
        path = self.path_of(artifact)
        return path.is_file() and path.stat().st_size == artifact.size

    def locked(self, artifact: Artifact) -> AbstractContextManager[None]:
        """The artifact's lock, waiting for another process that holds it (not re-entrant)."""
        return exclusive_lock(self.root / "partial" / f"{artifact.sha256}.lock")

    def problem(self, artifact: Artifact, rehash: bool = False) -> str | None:
        """Why the entry at the artifact's path is not the artifact: not a file, a wrong size
        (always checked), a wrong sha256 (with rehash). None when it is sound or absent."""
        path = self.path_of(artifact)
        if not os.path.lexists(path):
            return None
        if path.is_symlink() or not path.is_file():
            return "an entry that is not a regular file"
        size = path.stat().st_size
        if size != artifact.size:
            return f"{size} bytes, the lock says {artifact.size}"
        if rehash:
            actual = sha256_file(path)
            if actual != artifact.sha256:
                return f"sha256 {actual}, the lock says {artifact.sha256}"
        return None

    def quarantine(self, artifact: Artifact) -> Path:
        """Move the artifact's entry aside to `<store>/quarantine/<hash>.<time in ns>`, where it
        can be examined; its new path. Call it holding the artifact's lock."""
        folder = self.root / "quarantine"
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{artifact.sha256}.{time.time_ns()}"
        os.replace(self.path_of(artifact), target)
        return target

    def admit(self, candidate: Path, artifact: Artifact, what: str, origin: str) -> Path:
        """Move a verified file into the store (`candidate` is consumed only when it is ours)."""
        actual = sha256_file(candidate)
        if actual != artifact.sha256:
            raise HashMismatch(what, artifact, actual, origin)
        target = self.path_of(artifact)
        shared_folder(self.root)
        shared_folder(target.parent)
        os.chmod(candidate, SHARED_FILE)  # mkstemp and a strict umask make it private
        os.replace(candidate, target)
        return target

    def copy_in(self, source: Path, artifact: Artifact, what: str, origin: str) -> Path:
        """Copy a local file (find-links, mirror folder) into the store after checking its hash."""
        staging = self.root / "partial"
        staging.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=staging, suffix=".copy")
        os.close(fd)
        try:
            shutil.copyfile(source, tmp)
            return self.admit(Path(tmp), artifact, what, origin)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def wheelhouse(self, artifacts: list[Artifact], folder: Path) -> Path:
        """A folder of links named by file name, for installers that want names, not hashes."""
        shared_folder(folder)
        for artifact in artifacts:
            link = folder / artifact.filename
            if not link.exists():
                os.symlink(self.path_of(artifact).resolve(), link)
        return folder
