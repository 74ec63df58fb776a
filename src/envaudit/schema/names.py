"""Names that become one path component: environments, solutions, suites, base recipes.

Standard library only. A name is what a folder or file under a known root is called; anything
that could lead elsewhere (a separator, '.', '..'), name nothing (empty) or cannot be a file
name at all (a NUL byte, over NAME_MAX bytes) is not a name, whatever exists on disk.
"""

from __future__ import annotations

NAME_MAX = 255
"""Bytes in one path component on Linux file systems."""


def name_problem(value: str) -> str | None:
    """Why `value` is not a plain name, or None when it is one."""
    if not value.strip():
        return "it is empty"
    if value in (".", ".."):
        return f"{value!r} names a folder, not an entry in one"
    if "/" in value or "\\" in value:
        return "it holds a path separator"
    if "\0" in value:
        return "it holds a NUL byte"
    if len(value.encode("utf-8", "surrogateescape")) > NAME_MAX:
        return f"it is longer than {NAME_MAX} bytes"
    return None


def shown(value: str, limit: int = 60) -> str:
    """`value` quoted for a message, cut to `limit` characters."""
    return repr(value if len(value) <= limit else value[: limit - 3] + "...")
