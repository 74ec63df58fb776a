"""Find solutions under a folder in either layout: envaudit's and FlashInfer-Bench's.

envaudit's own layout is `<folder>/<name>/solution.json` with the source files beside it.
FlashInfer-Bench 0.1.2's `TraceSet.from_path` reads every `*.json` under its root's
`solutions/`, at any depth, as one Solution with its sources inline: it writes
`<author>/<op_type>/<definition>/<name>.json`, and its example roots hold `<name>.json`. Its
name and definition are what the file says, not where it sits. So a folder is indexed in both
layouts at once: every `*/solution.json` is ours, and every other `*.json` outside our solution
folders (where a `.json` is one of that solution's source files) is FlashInfer-Bench's.

Every command that looks a solution up (run, audit, the report) goes through one index, so they
all find the same solutions, and a name two files hold is an error naming both: which of them
runs would otherwise depend on which command asked. Only the few top-level fields the index
needs are kept; the whole solution is validated by whoever runs it (runtime/jobs.py), so a file
our model refuses (a C++ entry point, say) is still found by its name and refused with the
exact field at fault.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envaudit.errors import EnvauditError
from envaudit.schema.names import shown
from envaudit.schema.reading import UnreadableFile, kind_of, load_json

OURS = "envaudit"
"""`<folder>/<name>/solution.json`, sources beside it or inline."""
FLASHINFER_BENCH = "FlashInfer-Bench"
"""Any other `*.json` under the folder, sources inline."""

OUR_FILE = "solution.json"


class SolutionIndexError(EnvauditError):
    """Solutions cannot be told apart or listed (one name in two files; a file whose definition
    cannot be read, for a listing by definition): bad input, exit 2, naming the files."""


@dataclass(frozen=True)
class SolutionFile:
    """One file that holds (or should hold) a solution, as far as the index read it."""

    name: str
    """Its `name`; for a file without a readable one, the name its place gives (our folder's,
    or FlashInfer-Bench's `<name>.json`), so a lookup by that name reports the file's problem."""
    path: Path
    layout: str
    root: Path
    """The folder searched that holds it."""
    definition: str | None = None
    header: Mapping[str, Any] = field(default_factory=dict)
    """Its top-level fields but `sources` (author, env, baseline, spec, ...)."""
    problem: str | None = None
    """Why it is not readable as a solution (not JSON, no name); None when it is."""
    identity: tuple[int, int] | None = field(default=None, repr=False, compare=False)
    """(device, inode): one file reached through two roots or a link is one solution."""

    def described(self) -> str:
        return f"{self.path} ({self.layout} layout)"


@dataclass
class SolutionIndex:
    roots: tuple[Path, ...]
    files: dict[str, list[SolutionFile]] = field(default_factory=dict)
    """name -> every file that holds it (more than one is an error when the name is used)."""

    def where(self) -> str:
        """The folders searched, for a message."""
        return " or ".join(f"{root}/" for root in self.roots) or "no folder"

    def find(self, name: str) -> SolutionFile | None:
        """The one file of `name`, None when there is none; SolutionIndexError when two hold
        it."""
        found = self.files.get(name)
        if not found:
            return None
        _require_one(name, found)
        return found[0]

    def names(self) -> list[str]:
        """Every solution's name, sorted; SolutionIndexError when a name is in two files."""
        for name, found in sorted(self.files.items()):
            _require_one(name, found)
        return sorted(self.files)

    def of_definition(self, definition: str) -> list[str]:
        """The names of `definition`'s solutions, sorted: all FlashInfer-Bench would load for it.
        SolutionIndexError when one of them is in two files, or when a file could not be read
        far enough to tell whose it is (it may be one of them: FlashInfer-Bench itself refuses
        such a root)."""
        unknown = [f for found in self.files.values() for f in found if f.definition is None]
        if unknown:
            first = unknown[0]
            raise SolutionIndexError(
                f"{first.path}: cannot tell which definition it implements: {first.problem}",
                hint="fix or move the file; every *.json under a solutions folder is read as a"
                " solution",
            )
        names = sorted(n for n, found in self.files.items() if found[0].definition == definition)
        for name in names:
            _require_one(name, self.files[name])
        return names


def _require_one(name: str, found: Sequence[SolutionFile]) -> None:
    if len(found) > 1:
        raise SolutionIndexError(
            f"solution {shown(name)} is in two files: {found[0].described()} and"
            f" {found[1].described()}",
            hint="a solution's name must be unique across the solutions folders searched;"
            " rename one (its `name` field) or remove it",
        )


def solution_roots(solutions_root: Path, data_root: Path | None = None) -> list[Path]:
    """The folders a solution is looked for in: --solutions-root, and the data root's
    `solutions/` (where FlashInfer-Bench keeps a TraceSet's) when that is another folder."""
    roots = [solutions_root]
    if data_root is not None:
        beside = data_root / "solutions"
        if _is_dir(beside) and not _same_folder(beside, solutions_root):
            roots.append(beside)
    return roots


def index_solutions(roots: Iterable[Path]) -> SolutionIndex:
    """Every solution file under `roots` (a root that is not a folder holds none), by name.
    One file reached through two roots (a root inside another, a link) counts once."""
    index = SolutionIndex(roots=tuple(roots))
    seen: set[object] = set()
    for root in index.roots:
        if not _is_dir(root):
            continue
        for found in _files_under(root):
            identity = found.identity or found.path
            if identity not in seen:
                seen.add(identity)
                index.files.setdefault(found.name, []).append(found)
    return index


def _files_under(root: Path) -> list[SolutionFile]:
    """Our `*/solution.json` (a folder or a link to one), then every other `*.json` at any
    depth outside those folders, not through links to folders (as FlashInfer-Bench's rglob)."""
    ours: list[Path] = []
    theirs: list[Path] = []
    for top, folders, files in os.walk(root):
        here = Path(top)
        if here == root:
            mine = [f for f in folders if _is_file(here / f / OUR_FILE)]
            ours += (here / f / OUR_FILE for f in mine)
            folders[:] = [f for f in folders if f not in mine]
        theirs += (here / f for f in files if f.endswith(".json"))
    return [
        *(_read(path, OURS, root, path.parent.name) for path in sorted(ours)),
        *(_read(path, FLASHINFER_BENCH, root, path.stem) for path in sorted(theirs)),
    ]


_HEADERS: dict[tuple[str, int, int, int, int], tuple[dict[str, Any] | None, str | None]] = {}
"""(path, device, inode, mtime, size) -> (the file's top-level fields but sources, or why it has
none): an audit looks solutions up once per job, and a FlashInfer-Bench solution carries its
sources inline, so each unchanged file is parsed once per process."""


def _read(path: Path, layout: str, root: Path, place_name: str) -> SolutionFile:
    """What the index keeps of one file: its name and definition when it says them, else the
    name its place gives and the problem."""
    identity, header, problem = _header(path)
    if header is None:
        return SolutionFile(place_name, path, layout, root, problem=problem, identity=identity)
    name, definition = header.get("name"), header.get("definition")
    if not isinstance(name, str):
        problem = _not_a_string("name", name)
        return SolutionFile(place_name, path, layout, root, problem=problem, identity=identity)
    if not isinstance(definition, str):
        problem = _not_a_string("definition", definition)
        return SolutionFile(name, path, layout, root, problem=problem, identity=identity)
    return SolutionFile(name, path, layout, root, definition, header, identity=identity)


def _not_a_string(key: str, value: object) -> str:
    return f"not a solution: {'no' if value is None else 'its'} `{key}`" + (
        "" if value is None else f" is {type(value).__name__}, not a string"
    )


def _header(path: Path) -> tuple[tuple[int, int] | None, dict[str, Any] | None, str | None]:
    """((device, inode), the file's top-level fields but sources, or why it has none)."""
    try:
        info = os.stat(path)
    except OSError as exc:
        return None, None, f"cannot be read: {exc.strerror or exc}"
    identity = (info.st_dev, info.st_ino)
    if not stat.S_ISREG(info.st_mode):
        return identity, None, f"{kind_of(info.st_mode)}, not a regular file"
    key = (str(path), *identity, info.st_mtime_ns, info.st_size)
    if key not in _HEADERS:
        _HEADERS[key] = _parse(path)
    return identity, *_HEADERS[key]


def _parse(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    try:
        raw = load_json(path)
    except json.JSONDecodeError as exc:
        return None, f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
    except UnreadableFile as exc:
        return None, str(exc).removeprefix(f"{path}: ")
    except OSError as exc:
        return None, f"cannot be read: {exc.strerror or exc}"
    if not isinstance(raw, dict):
        return None, f"not a solution: its JSON is {type(raw).__name__}, not an object"
    return {k: v for k, v in raw.items() if k != "sources"}, None


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, a loop of links
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long, a loop of links
        return False


def _same_folder(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
