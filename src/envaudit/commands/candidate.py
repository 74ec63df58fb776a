"""A candidate: an implementation file that is not (yet) a solution folder, run beside a
definition's solutions (`envaudit run --candidate PATH/main.py --definition NAME`).

It becomes a solution of its own in the cache (`<cache>/candidates/<sha256 of the file, 16>/`),
never in solutions/: named `<definition>-candidate-<8 hex>`, entry point `main.py::run`, outputs
returned, any target, in the env given with --env, else the one the definition's baseline
declares. Its lines are result lines like any other, with that name and the file's hash.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from envaudit.dataset.solutions import OURS, index_solutions, solution_roots
from envaudit.dataset.traceset import DatasetRootError, load_traceset
from envaudit.errors import EnvauditError
from envaudit.schema.reading import UnreadableFile, read_bounded
from envaudit.schema.writes import replace_text
from envaudit.settings import cache_root

MAX_CANDIDATE_BYTES = 16 << 20
"""The largest candidate file read (16 MiB): a kernel's source, not a device read whole."""


def stage_candidate(
    path: Path, definition: str, data_root: Path, solutions_root: Path, env: str | None
) -> tuple[str, Path]:
    """(solution name, solutions root holding it) for the candidate file `path`."""
    if path.suffix != ".py":
        raise EnvauditError(f"--candidate {path}: not a Python file (a main.py with run())")
    try:
        content = read_bounded(path, MAX_CANDIDATE_BYTES, "--candidate")
    except UnreadableFile as exc:
        raise EnvauditError(str(exc), hint="name a main.py file") from None
    except OSError as exc:
        raise EnvauditError(f"--candidate {path}: cannot be read: {exc.strerror or exc}") from None
    try:
        known = load_traceset(data_root).definitions
    except DatasetRootError as exc:
        raise EnvauditError(str(exc)) from None
    if definition not in known:
        raise EnvauditError(
            f"--definition {definition}: not a definition under {data_root}",
            hint=f"definitions: {', '.join(sorted(known)[:12])}",
        )
    digest = hashlib.sha256(content).hexdigest()
    name = f"{definition}-candidate-{digest[:8]}"
    chosen = env or baseline_env(solutions_root, data_root, definition)
    if chosen is None:
        raise EnvauditError(
            f"--candidate: {definition} has no baseline declaring an env to run it in",
            hint="name one with --env ENV",
        )
    root = cache_root() / "candidates" / digest[:16]
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, folder / "main.py")
    solution = {
        "name": name,
        "definition": definition,
        "author": "candidate",
        "description": f"candidate {path.name} (sha256 {digest}), run with --candidate",
        "spec": {
            "language": "python",
            "target_hardware": [],
            "entry_point": "main.py::run",
            "destination_passing_style": False,
        },
        "sources": [{"path": "main.py"}],
        "env": chosen,
    }
    replace_text(folder / "solution.json", json.dumps(solution, indent=2) + "\n")
    return name, root


def stage_beside(
    path: Path,
    definition: str,
    data_root: Path,
    solutions_root: Path,
    env: str | None,
    only: list[str],
) -> tuple[list[str], Path]:
    """For an audit: the candidate staged, with the definition's solutions (or `only` those)
    beside it in its root; (the solutions to run, that root)."""
    staged, root = stage_candidate(path, definition, data_root, solutions_root, env)
    beside = link_definition_solutions(root, solutions_root, data_root, definition)
    return [*(only or beside), staged], root


def link_definition_solutions(
    root: Path, solutions_root: Path, data_root: Path, definition: str
) -> list[str]:
    """Link the definition's solutions under solutions_root (our folders, FlashInfer-Bench's
    files) into the candidate's root, so an audit runs them beside it from one root; their
    names, with those of the data root's solutions/, which the audit finds there itself."""
    index = index_solutions(solution_roots(solutions_root, data_root))
    names = index.of_definition(definition)
    for name in names:
        found = index.find(name)
        if found is None or found.root != solutions_root:
            continue
        if found.layout == OURS:
            source, link = found.path.parent, root / found.path.parent.name
        else:
            source, link = found.path, root / f"{found.path.parent.name}-{found.path.name}"
        if not link.exists():
            link.symlink_to(source.resolve(), target_is_directory=source.is_dir())
    return names


def baseline_env(solutions_root: Path, data_root: Path, definition: str) -> str | None:
    """The env the definition's baseline solution declares (None without one), in either
    layout (a FlashInfer-Bench solution declares neither)."""
    index = index_solutions(solution_roots(solutions_root, data_root))
    for found in sorted((f for fs in index.files.values() for f in fs), key=lambda f: f.path):
        header = found.header
        if found.definition == definition and header.get("baseline") and header.get("env"):
            return str(header["env"])
    return None
