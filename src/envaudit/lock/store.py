"""The content-addressed store: `<store>/sha256/<hash>` holds a file only once its hash checked out.

Downloads grow in `<store>/partial/<hash>.part` (kept between runs, so an interrupted download
resumes) and are renamed into place after verification. Any number of processes may fetch into
one store at once: a fetch holds the artifact's lock (`<store>/partial/<hash>.lock`, an advisory
`flock`) while it checks the entry, grows the partial file or moves an entry, so one process
brings each file and the others find it there. Every entry is only ever replaced whole (a
rename) by a verified file. An entry that `fetch` finds not to be what its hash says (wrong
size; wrong sha256 when rehashed) is moved aside into `<store>/quarantine/`, not trusted.

A base image pinned by registry digest may be kept too (`fetch --bases`), for machines that
cannot reach its registry: the engine's `docker save` archive is an ordinary entry, by its own
sha256, and `<store>/bases/<registry digest>.json` (a `BaseArchive`) says which archive holds
that digest and which image id loading it must give. The record is store bookkeeping, never part
of a lock: `docker save` output differs between engines and versions, so the lock's identity of
the base stays the registry digest, and two stores may hold different archives of one digest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envaudit.errors import EXIT_FAILED
from envaudit.lock.files import LockError
from envaudit.schema.locks import Artifact
from envaudit.schema.paths import exclusive_lock, sha256_file, write_text_atomically

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


class BaseArchive(BaseModel):
    """`<store>/bases/<digest>.json`: the archive (`docker save`) that holds a base pinned by
    registry digest, and the image id the engine gave it when it was saved."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record_version: Literal[1] = 1
    reference: str = Field(description="name@sha256:... as the lock records it.")
    image_id: str = Field(
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="The image's id (its config's sha256): what a load must give.",
    )
    archive: Artifact = Field(description="The saved archive, a store entry by its sha256.")
    engine: str = Field(description="The engine (and version) that wrote the archive.")

    @property
    def digest(self) -> str:
        return self.reference.rpartition("@")[2]


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

    def problem(
        self, artifact: Artifact, rehash: bool = False, source: str = "the lock"
    ) -> str | None:
        """Why the entry at the artifact's path is not the artifact: not a file, a wrong size
        (always checked), a wrong sha256 (with rehash). None when it is sound or absent.
        `source` is what names the artifact (a base archive's record, not a lock)."""
        path = self.path_of(artifact)
        if not os.path.lexists(path):
            return None
        if path.is_symlink() or not path.is_file():
            return "an entry that is not a regular file"
        size = path.stat().st_size
        if size != artifact.size:
            return f"{size} bytes, {source} says {artifact.size}"
        if rehash:
            actual = sha256_file(path)
            if actual != artifact.sha256:
                return f"sha256 {actual}, {source} says {artifact.sha256}"
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

    def base_record_path(self, digest: str) -> Path:
        return self.root / "bases" / f"{digest.removeprefix('sha256:')}.json"

    def base_record(self, digest: str) -> BaseArchive | None:
        """The record of the archive kept for this registry digest, None when there is none; a
        record that is not one, or names another digest, is refused (exit 2)."""
        path = self.base_record_path(digest)
        if not path.is_file():
            return None
        try:
            record = BaseArchive.model_validate_json(path.read_bytes())
        except (OSError, ValidationError) as exc:
            raise LockError(
                f"{path}: not a base archive record: {str(exc).splitlines()[0]}",
                hint="remove it and run `envaudit fetch ENV --bases` again",
            ) from None
        if record.digest != digest:
            raise LockError(
                f"{path}: records {record.reference}, not the digest {digest} it is named by",
                hint="remove it and run `envaudit fetch ENV --bases` again",
            )
        return record

    def keep_base_record(self, record: BaseArchive) -> Path:
        """Write the record (atomically: a reader sees the old record or the new one)."""
        path = self.base_record_path(record.digest)
        shared_folder(path.parent)
        return write_text_atomically(path, record.model_dump_json(indent=1) + "\n")

    def wheelhouse(self, artifacts: list[Artifact], folder: Path) -> Path:
        """A folder of links named by file name, for installers that want names, not hashes."""
        shared_folder(folder)
        for artifact in artifacts:
            link = folder / artifact.filename
            if not link.exists():
                os.symlink(self.path_of(artifact).resolve(), link)
        return folder
