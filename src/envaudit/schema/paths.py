"""Files named by the dataset: content hashes, and paths kept inside their root.

Standard library only: `check-inputs` and the harness both use it, so a blob is hashed and
confined to the TraceSet root by one piece of code.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class PathOutsideRoot(ValueError):
    """A relative path that is absolute or climbs out of its root."""


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
    readers see the old file or the new one, never half of one. The result is world-readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def path_inside(root: Path, relative: str) -> Path:
    """`root / relative`, resolved; PathOutsideRoot when it is absolute or leaves the root."""
    if Path(relative).is_absolute():
        raise PathOutsideRoot(f"blob path {relative} is absolute; paths are relative to the root")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise PathOutsideRoot(f"blob path {relative} leaves the root (escapes it through '..')")
    return resolved
