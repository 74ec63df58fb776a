"""Names that become one path component: environments, solutions, suites, base recipes.

Standard library only (not a harness file: the harness builds no path from a name). A name is
what a folder or file under a known root is called; anything that could lead elsewhere (a
separator, '.', '..'), name nothing (empty) or cannot be a file name at all (a NUL byte, over
NAME_MAX bytes) is not a name, whatever exists on disk.
"""

from __future__ import annotations

import unicodedata
from pathlib import Path

from envaudit.errors import shown as shown  # where every layer's messages quote a value
from envaudit.schema.paths import PathOutsideRoot

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
    hidden = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf")), None)
    if hidden is not None:  # an ANSI escape clears a terminal, a bidi override reverses a row
        return f"it holds the control or format character U+{ord(hidden):04X}"
    if "|" in value or "`" in value:
        return "it holds '|' or '`', which break the report's Markdown tables"
    if len(value.encode("utf-8", "surrogateescape")) > NAME_MAX:
        return f"it is longer than {NAME_MAX} bytes"
    return None


def named_path(root: Path, *names: str, what: str = "name") -> Path:
    """`root / names[0] / names[1] ...` where every part is a plain name (schema.names) and
    the result, resolved, stays under `root` resolved (a symlink inside the root does not lead
    it out either). PathOutsideRoot naming the bad part otherwise. Every writer whose path is
    built from data (a result line's definition, a solution's author, a definition's op_type)
    builds it here, so untrusted data cannot write outside its folder."""
    for name in names:
        problem = name_problem(name)
        if problem is not None:
            raise PathOutsideRoot(f"{what} {shown(name)} is not a plain name: {problem}")
    path = root.joinpath(*names)
    if not path.resolve().is_relative_to(root.resolve()):
        raise PathOutsideRoot(f"{path} leads out of {root} (through a symbolic link)")
    return path


def check_under(root: Path, path: Path) -> Path:
    """`path`, unless resolved it lies outside `root` resolved (PathOutsideRoot): the last
    check of a writer before it replaces a file."""
    if not path.resolve().is_relative_to(root.resolve()):
        raise PathOutsideRoot(f"{path} is outside {root}; nothing was written")
    return path
