"""Files named by the dataset: content hashes, and paths kept inside their root.

Standard library only: `check-inputs` and the harness both use it, so a blob is hashed and
confined to the TraceSet root by one piece of code.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from envaudit.schema.reading import kind_of


class PathOutsideRoot(ValueError):
    """A relative path that is absolute or climbs out of its root."""


class NotOurs(OSError):
    """An output path that holds something envaudit must not replace or write through: a
    symbolic link, a FIFO, a device node, a socket, a folder where a file goes (or a file where
    a folder goes). Replacing /dev/null as root breaks a machine; following a planted link
    writes over a stranger's file."""

    def __init__(self, path: Path, found: str, wanted: str = "a regular file") -> None:
        super().__init__(errno.EEXIST, f"is {found}, not {wanted} envaudit may write")
        self.filename = str(path)
        self.found = found


def _kind(mode: int) -> str:
    """What is at an output path, in words (schema.reading names the rest as a reader does)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a regular file" if stat.S_ISREG(mode) else kind_of(mode)


def refuse_foreign(path: Path) -> None:
    """NotOurs unless `path` is absent or a regular file (a link is refused, never followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise NotOurs(path, _kind(mode))


def output_folder(path: Path) -> Path:
    """`path` made (with its parents) as a folder of envaudit's outputs; NotOurs when it is a
    symbolic link or not a folder, so nothing is written through a planted link."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)
        mode = os.lstat(path).st_mode
    if not stat.S_ISDIR(mode):
        raise NotOurs(path, _kind(mode), "a folder")
    return path


def open_for_append(path: Path, flags: int = os.O_WRONLY) -> int:
    """A descriptor appending to `path` (created 0644 if absent); a link is not followed and
    anything but a regular file is refused (NotOurs), the descriptor closed."""
    refuse_foreign(path)
    # O_NONBLOCK: opening a FIFO that appeared since the check must fail, not wait for a reader.
    how = flags | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, how, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO):
            raise NotOurs(
                path, "a symbolic link" if exc.errno == errno.ELOOP else "a FIFO"
            ) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotOurs(path, _kind(mode))
    os.set_blocking(fd, True)
    return fd


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def write_text_atomically(path: Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8) the way write_bytes_atomically does."""
    return write_bytes_atomically(path, text.encode("utf-8"))


def write_bytes_atomically(path: Path, data: bytes) -> Path:
    """Replace `path` with `data` through a temporary file in the same folder and a rename, so
    readers see the old file or the new one, never half of one. The result is world-readable.
    Only a regular file is replaced (NotOurs otherwise): a rename over /dev/null or a FIFO would
    put a file where the device or pipe was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_foreign(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an advisory lock (flock) on `path`, created if absent, waiting for any other holder.
    Not re-entrant: a second `exclusive_lock` of one path in one process waits forever."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class FolderBusy(Exception):
    """Another envaudit command holds the folder in a way this one cannot share."""


@contextmanager
def folder_writers(folder: Path, exclusive: bool) -> Iterator[None]:
    """Hold `folder` (made if absent) as one of its writers: shared by the commands that only
    append result lines (run, audit: their appends are whole lines under a per-line lock),
    exclusive for one that replaces its files (merge: a rename would drop the lines appended
    meanwhile). The lock is on the folder itself, so it leaves no file behind; FolderBusy at
    once when another command holds it the other way."""
    output_folder(folder)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(str(folder)) from None
        yield
    finally:
        os.close(fd)  # releases the lock


def path_inside(root: Path, relative: str) -> Path:
    """`root / relative`, resolved; PathOutsideRoot when it is absolute or leaves the root."""
    if Path(relative).is_absolute():
        raise PathOutsideRoot(f"blob path {relative} is absolute; paths are relative to the root")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise PathOutsideRoot(f"blob path {relative} leaves the root (escapes it through '..')")
    return resolved
