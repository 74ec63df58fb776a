"""Whole files envaudit writes for users (lock.json, upstreams.json, the report's files): each
replaced atomically (schema.paths: a temporary file in the same folder, then a rename), and a
write that fails (a full disk, a quota) raised as the exit-2 WriteFailed naming the file and the
free space, where the bare OSError of a write names neither."""

from __future__ import annotations

from pathlib import Path

from envaudit.errors import write_failed
from envaudit.schema.paths import write_bytes_atomically


def replace_bytes(path: Path, data: bytes) -> Path:
    """Replace `path` with `data`, all or nothing; WriteFailed when it cannot be written."""
    try:
        return write_bytes_atomically(path, data)
    except OSError as exc:
        raise write_failed(
            path, exc, "write it (the old file, if any, is left as it was)"
        ) from None


def replace_text(path: Path, text: str) -> Path:
    """Replace `path` with `text` (UTF-8) the way replace_bytes does."""
    return replace_bytes(path, text.encode("utf-8"))
