"""Files named by the dataset: content hashes, and paths kept inside their root.

Standard library only: `check-inputs` and the harness both use it, so a blob is hashed and
confined to the TraceSet root by one piece of code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path


class PathOutsideRoot(ValueError):
    """A relative path that is absolute or climbs out of its root."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_inside(root: Path, relative: str) -> Path:
    """`root / relative`, resolved; PathOutsideRoot when it is absolute or leaves the root."""
    if Path(relative).is_absolute():
        raise PathOutsideRoot(f"blob path {relative} is absolute; paths are relative to the root")
    resolved = (root / relative).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise PathOutsideRoot(f"blob path {relative} leaves the root (escapes it through '..')")
    return resolved
