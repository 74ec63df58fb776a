"""Our solutions as FlashInfer-Bench Solutions.

On disk a solution of ours is `solutions/<name>/solution.json` with its source files beside it
(`sources[].content` omitted). FlashInfer-Bench's Solution requires the content inline and keeps
solutions under `solutions/<author>/<op_type>/<definition>/<name>.json`. Every solution `run`
finds is exported (dataset/solutions.py: both layouts, under --solutions-root and the data
root's solutions/), so a FlashInfer-Bench file found elsewhere is rewritten into the layout too.
This writes that layout,
every source file's text inlined; our own fields (`env`, `baseline`) stay in the file, where its
loader ignores them. A source file that is missing, outside the solution's folder or not UTF-8
text refuses the export before anything is written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envaudit.dataset.solutions import (
    SolutionIndex,
    SolutionIndexError,
    index_solutions,
    solution_roots,
)
from envaudit.dataset.traceset import DatasetRootError, load_traceset
from envaudit.errors import EnvauditError
from envaudit.schema.models import Solution
from envaudit.schema.names import check_under, named_path
from envaudit.schema.paths import PathOutsideRoot
from envaudit.schema.sources import source_outside
from envaudit.schema.writes import replace_text


class ExportError(EnvauditError):
    """A solution that cannot be exported as it is (exit 2: fix the solution, then export)."""


def render_solutions(index: SolutionIndex, op_types: dict[str, str], out: Path) -> dict[Path, str]:
    """Path -> text of every solution in `index` in FlashInfer-Bench's layout under
    `out/solutions`; `op_types` maps a definition to its op_type. Nothing is written."""
    files: dict[Path, str] = {}
    try:
        paths = [found.path for name in index.names() if (found := index.find(name))]
    except SolutionIndexError as exc:
        raise ExportError(str(exc), hint=exc.hint) from None
    for path in paths:
        solution = _load(path)
        op_type = op_types.get(solution.definition)
        if op_type is None:
            raise ExportError(
                f"{path}: definition {solution.definition} is not in the dataset (its op_type"
                " names the folder FlashInfer-Bench expects)"
            )
        body: dict[str, Any] = solution.model_dump(mode="json", exclude_none=True)
        body["sources"] = [
            {"path": s.path, "content": s.content or _read_source(path.parent, s.path)}
            for s in solution.sources
        ]
        files[_target(path, out, solution, op_type)] = json.dumps(body, indent=2) + "\n"
    return files


def _target(path: Path, out: Path, solution: Solution, op_type: str) -> Path:
    """out/solutions/<author>/<op_type>/<definition>/<name>.json, proven to stay under
    out/solutions (the models check these names; this is the writer's own proof)."""
    parts = (solution.author, op_type, solution.definition, f"{solution.name}.json")
    try:
        return check_under(out, named_path(out / "solutions", *parts, what="path part"))
    except PathOutsideRoot as exc:
        raise ExportError(f"{path}: {exc}", hint="nothing was written") from None


def export_solutions(solutions_root: Path, data_root: Path, out: Path) -> list[Path]:
    """Write every solution under `solutions_root` or the data root's solutions/ in
    FlashInfer-Bench's layout under `out/solutions` (op_types from the definitions under
    `data_root`); the paths written."""
    try:
        definitions = load_traceset(data_root).definitions
    except DatasetRootError as exc:
        raise ExportError(str(exc)) from None
    op_types = {name: d.definition.op_type for name, d in definitions.items()}
    index = index_solutions(solution_roots(solutions_root, data_root))
    files = render_solutions(index, op_types, out)
    for path, text in files.items():
        replace_text(path, text)
    return list(files)


def _load(path: Path) -> Solution:
    try:
        return Solution.model_validate(json.loads(path.read_bytes()))
    except (OSError, ValueError, ValidationError) as exc:
        raise ExportError(f"{path}: not a valid solution: {exc}"[:2000]) from None


def _read_source(folder: Path, relative: str) -> str:
    problem = source_outside(folder, relative)
    if problem is not None:
        raise ExportError(f"{folder / 'solution.json'}: {problem}")
    source = folder / relative
    try:
        return source.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"{folder / 'solution.json'}: source {relative}: {exc}") from None
