"""Load a solution and call it the way FlashInfer-Bench does.

Entry point `file.py::func`. Destination-passing style (the default): `func(*inputs, *outputs)`
with outputs preallocated by the harness; otherwise `func(*inputs)` returns the outputs. An
optional module-level `prepare(*inputs)` runs outside timing; its result is passed to every call
as the keyword argument `prepared`.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envaudit.schema.sources import source_outside


class SolutionLoadError(RuntimeError):
    """The solution's sources could not be found, compiled or imported (COMPILE_ERROR)."""


@dataclass
class LoadedSolution:
    name: str
    func: Callable[..., Any]
    prepare: Callable[..., Any] | None
    destination_passing: bool
    source_hash: str

    def call(self, inputs: Mapping[str, Any], outputs: list[Any] | None, prepared: Any) -> Any:
        args = list(inputs.values())
        if self.destination_passing:
            args += outputs or []
        if self.prepare is not None:
            return self.func(*args, prepared=prepared)
        return self.func(*args)


def source_files(solution: Mapping[str, Any], solution_dir: Path) -> dict[str, bytes]:
    """Relative path -> bytes of each source: inline `content`, or the file beside solution.json."""
    files: dict[str, bytes] = {}
    for source in solution["sources"]:
        rel = source["path"]
        outside = source_outside(solution_dir, rel)
        if outside is not None:
            raise SolutionLoadError(outside)
        if source.get("content") is not None:
            files[rel] = source["content"].encode()
        else:
            path = solution_dir / rel
            if not path.is_file():
                raise SolutionLoadError(f"source {rel} is missing from {solution_dir}")
            files[rel] = path.read_bytes()
    return files


def _prefix(name: str) -> str:
    """A short, plain form of a solution's name for a folder name: a name may be as long as a
    whole path component, and the folder's name adds to it."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in name[:40])
    return kept or "solution"


def hash_sources(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()


def load_solution(solution: Mapping[str, Any], files: Mapping[str, bytes]) -> LoadedSolution:
    """Import the entry module from a private copy of the sources (`source_files`), so imports
    between the solution's own files work and nothing is written next to the originals."""
    entry_file, func_name = solution["spec"]["entry_point"].split("::")
    if entry_file not in files:
        raise SolutionLoadError(f"entry file {entry_file} is not among the sources")
    workdir = Path(tempfile.mkdtemp(prefix=f"envaudit-{_prefix(str(solution['name']))}-"))
    atexit.register(shutil.rmtree, workdir, True)
    for rel, data in files.items():
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (workdir / rel).write_bytes(data)
    sys.path.insert(0, str(workdir))
    module_name = f"envaudit_solution_{hashlib.sha256(str(workdir).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, workdir / entry_file)
    if spec is None or spec.loader is None:
        raise SolutionLoadError(f"cannot import {entry_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise SolutionLoadError(
            f"importing {entry_file} failed: {type(exc).__name__}: {exc}"
        ) from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise SolutionLoadError(f"{entry_file} defines no function {func_name}")
    prepare = getattr(module, "prepare", None)
    return LoadedSolution(
        name=solution["name"],
        func=func,
        prepare=prepare if callable(prepare) else None,
        destination_passing=bool(solution["spec"].get("destination_passing_style", True)),
        source_hash=hash_sources(files),
    )
