"""What a solution's Python sources name that decides how its job is scheduled, and which
library modules its worker imports before loading it.

Standard library only: the fork server (envaudit.harness.forkserver) reads it to choose which
of its processes forks a job, the audit (runtime/scheduling/audit.py) to order its jobs, and the
worker (envaudit.harness.preload) to import ahead what the solution's first lines would.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

COMPILER = "compiler"
TRITON = "triton"
MARKERS: dict[str, tuple[str, ...]] = {
    COMPILER: ("torch.compile", "flex_attention", "torch._dynamo", "torch._inductor"),
    TRITON: ("triton",),
}
MARKER_SCAN_FILES = 200
MARKER_SCAN_BYTES = 1 << 20
EVERY_WORKERS_LIBRARIES = frozenset({"torch", "triton", "numpy", "safetensors"})
"""What every worker has imported, or has from its fork server, before it imports a solution's
leading libraries."""


def libraries_named(folder: Path) -> frozenset[str]:
    """Which of COMPILER (torch.compile, FlexAttention, dynamo, inductor) and TRITON the Python
    sources under a solution's folder mention. A guess, for scheduling and preloading only: a
    solution that reaches them through a library is not seen."""
    found: set[str] = set()
    try:
        for path in sorted(folder.rglob("*.py"))[:MARKER_SCAN_FILES]:
            with path.open(errors="replace") as source:
                text = source.read(MARKER_SCAN_BYTES)
            found |= {k for k, markers in MARKERS.items() if any(m in text for m in markers)}
            if len(found) == len(MARKERS):
                break
    except OSError:
        pass
    return frozenset(found)


def names_compiler(folder: Path) -> bool:
    """Whether the solution names the compiler: it needs what the fork server's preload imports
    (torch._dynamo alone takes 4.3 s in a fresh process on the H200 machine)."""
    return COMPILER in libraries_named(folder)


def imports_libraries_first(
    entry_point: str, sources: Sequence[Mapping[str, Any]], folder: Path
) -> bool:
    """Whether the solution's entry module (`entry_point`, as its solution.json's spec gives
    it) imports, before any code of its own (leading_imports), a library beyond the standard
    library and EVERY_WORKERS_LIBRARIES. Its worker then imports that library before its gate,
    for seconds (on the H200 machine, s52 in docs/lab/audit-throughput.md: FA4's flash_attn.cute
    4.9-6.1 s, flashinfer.gdn_prefill 2.3-2.6 s, tilelang 1.1 s), so an audit stages such jobs
    deeper (runtime/scheduling/audit.py, stage_ahead). `sources` are the solution.json's entries,
    read from `folder` where not inline. False where a source cannot be read: the job's load says
    why."""
    try:
        files = _python_sources(sources, folder)
    except OSError:
        return False
    return any(
        root not in sys.stdlib_module_names and root not in EVERY_WORKERS_LIBRARIES
        for root in (
            name.split(".")[0] for name in leading_imports(files, entry_point.split("::")[0])
        )
    )


def source_outside(folder: Path, rel: str) -> str | None:
    """Why the source file `rel` of the solution in `folder` would be read from outside that
    folder (an absolute path, '..', or a symbolic link that leads out), or None. A solution
    is its folder: a source read from elsewhere is not what its hash, export and review see."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts:
        return f"source {rel} must stay inside the solution folder {folder}"
    resolved = (folder / rel).resolve()
    if not resolved.is_relative_to(folder.resolve()):
        return (
            f"source {rel} is a symbolic link out of the solution folder {folder} (to {resolved})"
        )
    return None


def source_bytes(source: Mapping[str, Any], read: Callable[[str], bytes]) -> bytes:
    """One solution.json source's bytes: its inline `content`, or `read(relative path)`."""
    content = source.get("content")
    return content.encode() if content is not None else read(source["path"])


def _python_sources(sources: Sequence[Mapping[str, Any]], folder: Path) -> dict[str, bytes]:
    """The solution's Python sources by relative path (inline or beside its solution.json),
    at most MARKER_SCAN_FILES of them; paths that leave the folder are skipped."""
    files: dict[str, bytes] = {}
    for source in sources:
        rel = PurePosixPath(source["path"])
        if rel.suffix != ".py" or rel.is_absolute() or ".." in rel.parts:
            continue
        if source.get("content") is None and source_outside(folder, str(rel)) is not None:
            continue
        files[str(rel)] = source_bytes(source, lambda path: (folder / path).read_bytes())
        if len(files) >= MARKER_SCAN_FILES:
            break
    return files


def leading_imports(files: Mapping[str, bytes], entry: str) -> tuple[str, ...]:
    """The library modules the solution imports before any code of its own runs.

    These are the entry module's top-level import statements, in order, up to the first
    statement that is not one (a docstring and `from __future__` aside) or a relative import.
    An import of one of the solution's own modules (a top-level name among `files`, its
    sources by path) ends them too, after the leading imports of that module's file, found the
    same way: importing it runs them first. Importing these ahead of the solution runs library
    code only, in the order the solution would and before any line of its own: a solution that
    sets a variable, or runs any code of its own, before it imports a library keeps that import
    for itself. `from a.b import c` counts as module a.b. Sources that do not parse give none."""
    found: list[str] = []
    own = {PurePosixPath(name).parts[0].removesuffix(".py") for name in files}
    _leading(files, own, entry, found, {entry})
    return tuple(found)


def _leading(
    files: Mapping[str, bytes], own: set[str], path: str, found: list[str], seen: set[str]
) -> None:
    if path not in files:
        return
    try:
        tree = ast.parse(files[path])
    except (SyntaxError, ValueError):
        return
    for index, node in enumerate(tree.body):
        if index == 0 and _is_docstring(node):
            continue
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        names = _imported(node)
        if names is None:
            return
        for name in names:
            if name.split(".")[0] in own:
                module = _module_file(name, files)
                if module is not None and module not in seen:
                    seen.add(module)
                    _leading(files, own, module, found, seen)
                return
            if name not in found:
                found.append(name)


def _module_file(name: str, files: Mapping[str, bytes]) -> str | None:
    """The source an import of the solution's own module `name` runs first: its top-level
    package's __init__.py, else the module's own file."""
    parts = name.split(".")
    for candidate in (f"{parts[0]}/__init__.py", "/".join(parts) + ".py"):
        if candidate in files:
            return candidate
    return None


def _is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _imported(node: ast.stmt) -> list[str] | None:
    """The modules an absolute import statement imports; None for any other statement."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module]
    return None
