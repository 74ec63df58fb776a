"""The layers of docs/architecture.md, checked on the code: every `envaudit` import (at module
level or inside a function) points down the order below or stays in its own layer, the harness
is imported by nothing else, and no two modules import each other, however indirectly."""

from __future__ import annotations

import ast
import graphlib
import shutil
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

LAYERS = (
    ("envaudit", 0),
    ("envaudit.errors", 0),
    ("envaudit.settings", 0),
    ("envaudit.schema", 1),
    ("envaudit.dataset", 2),
    ("envaudit.lock", 3),
    ("envaudit.image", 4),
    ("envaudit.harness", 5),
    ("envaudit.runtime", 6),
    ("envaudit.report", 7),
    ("envaudit.commands", 8),
    ("envaudit.cli", 9),
    ("envaudit.cli_common", 9),
    ("envaudit.cli_data", 9),
    ("envaudit.cli_envs", 9),
    ("envaudit.console", 9),
    ("envaudit.__main__", 9),
)
"""Module prefix -> layer (the longest prefix wins): a module imports only lower layers and its
own. Layer 5, the harness, runs inside solution environments: it imports its own files and
those its declared list names (envaudit.schema.harness), and nothing imports it."""

REPORT_MAY_IMPORT = {0, 1, 2, 7}
"""The report reads result files and the dataset; it never runs, builds or locks anything."""

RUNTIME_PARTS = (
    ("envaudit.runtime", 0),
    ("envaudit.runtime.supervision", 1),
    ("envaudit.runtime.base", 2),
    ("envaudit.runtime.runtimes", 3),
    ("envaudit.runtime.registry", 4),
    ("envaudit.runtime.scheduling", 5),
)
"""Inside the runtime, the same rule: the job and its helpers, then supervision, the Runtime
base, the runtimes, the registry that names them, and scheduling, which uses them all."""


def _rank(module: str, table: tuple[tuple[str, int], ...]) -> int:
    found = [(len(p), r) for p, r in table if module == p or module.startswith(p + ".")]
    return max(found)[1]


def _modules(src: Path) -> dict[str, Path]:
    found = {}
    for path in sorted((src / "envaudit").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(module: str, path: Path, known: set[str]) -> Iterator[str]:
    """The envaudit modules `module` imports (a name imported from a package counts as the
    package's submodule when there is one), a module named by a string too: what
    importlib.import_module loads is an import all the same."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    text = path.read_text()
    by_name = "import_module" in text  # else a module's name is what `python -m` runs
    for node in ast.walk(ast.parse(text)):
        if by_name and isinstance(node, ast.Constant) and isinstance(node.value, str):
            # importlib.import_module("envaudit.x") or a table of "envaudit.x:Class" names
            named = node.value.partition(":")[0]
            if named in known and named != module and "." in named:
                yield named
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "envaudit")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "envaudit":
                continue
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base


def violations(src: Path) -> list[str]:
    """Every import that breaks the layers, and every cycle, in the tree under `src`."""
    modules = _modules(src)
    known = set(modules)
    harness_allowed = _declared_harness_modules(src)
    graph: dict[str, set[str]] = {}
    found: list[str] = []
    for module, path in modules.items():
        graph[module] = {m for m in _imports(module, path, known) if m != module}
        for target in sorted(graph[module]):
            problem = _problem(module, target, harness_allowed)
            if problem:
                found.append(f"{path.relative_to(src)}: imports {target}: {problem}")
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        found.append(f"import cycle: {' -> '.join(exc.args[1])}")
    return found


def _problem(module: str, target: str, harness_allowed: set[str]) -> str | None:
    own, theirs = _rank(module, LAYERS), _rank(target, LAYERS)
    if own == 5:
        allowed = theirs == 5 or target in harness_allowed or target == "envaudit"
        return None if allowed else "the harness imports only its declared files"
    if theirs == 5:
        return "nothing outside the harness imports it"
    if theirs > own:
        return "an upward import"
    if own == 7 and theirs not in REPORT_MAY_IMPORT:
        return "the report imports only schema, dataset and the base"
    if own == theirs == 6 and _rank(target, RUNTIME_PARTS) > _rank(module, RUNTIME_PARTS):
        return "an upward import inside the runtime"
    return None


CLI_MAY_NOT_IMPORT = (
    "envaudit.dataset",
    "envaudit.lock",
    "envaudit.image",
    "envaudit.runtime",
    "envaudit.report",
)
"""What the command line reaches only through envaudit.commands: a cli*.py module or console.py
parses flags, calls one use case and renders its answer (docs/architecture.md, layer 9). It may
import commands, console, errors, settings and schema (the option models)."""


def _is_cli(module: str) -> bool:
    """The command line's modules: the commands, their options and their terminal output."""
    return module in ("envaudit.cli", "envaudit.console") or module.startswith("envaudit.cli_")


def cli_bypasses(src: Path) -> list[str]:
    """Every import in a cli*.py module or console.py (at module level, inside a function, or
    for type hints only under TYPE_CHECKING) of a layer below the commands."""
    modules = _modules(src)
    known = set(modules)
    found = []
    for module, path in modules.items():
        if not _is_cli(module):
            continue
        for target in sorted(set(_imports(module, path, known))):
            if any(target == p or target.startswith(p + ".") for p in CLI_MAY_NOT_IMPORT):
                found.append(f"{path.relative_to(src)}: imports {target}: not through commands/")
    return found


def _declared_harness_modules(src: Path) -> set[str]:
    text = (src / "envaudit" / "schema" / "harness.py").read_text()
    tree = ast.parse(text)
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "HARNESS_FILES":
            files = [
                f.removesuffix(".py").removesuffix("/__init__")
                for f in ast.literal_eval(node.value)
            ]
            return {f.replace("/", ".") for f in files}
    raise AssertionError("schema/harness.py declares no HARNESS_FILES")


def test_the_code_keeps_its_layers() -> None:
    found = violations(REPO / "src")
    assert not found, "\n".join(found)


def test_an_injected_upward_import_is_caught(tmp_path: Path) -> None:
    shutil.copytree(REPO / "src" / "envaudit", tmp_path / "envaudit")
    schema = tmp_path / "envaudit" / "schema" / "models.py"
    schema.write_text(schema.read_text() + "\nfrom envaudit.runtime.jobs import Job  # noqa\n")
    found = violations(tmp_path)
    assert any("models.py: imports envaudit.runtime.jobs: an upward import" in f for f in found)


def test_an_injected_cycle_and_a_harness_import_are_caught(tmp_path: Path) -> None:
    shutil.copytree(REPO / "src" / "envaudit", tmp_path / "envaudit")
    errors = tmp_path / "envaudit" / "settings.py"
    errors.write_text(errors.read_text() + "\nimport envaudit.errors  # noqa\n")
    base = tmp_path / "envaudit" / "errors.py"
    base.write_text(base.read_text() + "\nimport envaudit.settings  # noqa\n")
    report = tmp_path / "envaudit" / "report" / "merge.py"
    report.write_text(report.read_text() + "\nfrom envaudit.harness import timing  # noqa\n")
    found = violations(tmp_path)
    assert any(f.startswith("import cycle:") for f in found), found
    assert any("nothing outside the harness imports it" in f for f in found), found


def test_an_import_by_name_through_importlib_is_caught(tmp_path: Path) -> None:
    shutil.copytree(REPO / "src" / "envaudit", tmp_path / "envaudit")
    schema = tmp_path / "envaudit" / "schema" / "models.py"
    schema.write_text(
        schema.read_text() + "\nimport importlib  # noqa\n"
        'JOBS = importlib.import_module("envaudit.runtime.jobs")  # noqa\n'
    )
    found = violations(tmp_path)
    assert any("models.py: imports envaudit.runtime.jobs: an upward import" in f for f in found)


def test_the_command_line_goes_through_the_commands() -> None:
    found = cli_bypasses(REPO / "src")
    assert not found, "\n".join(found)


def test_a_cli_import_below_the_commands_is_caught(tmp_path: Path) -> None:
    shutil.copytree(REPO / "src" / "envaudit", tmp_path / "envaudit")
    data = tmp_path / "envaudit" / "cli_data.py"
    data.write_text(
        data.read_text() + "\nif TYPE_CHECKING:\n"
        "    from envaudit.report.compare import Comparison  # noqa\n"
    )
    envs = tmp_path / "envaudit" / "cli_envs.py"
    envs.write_text(envs.read_text() + "\n\ndef late():\n    import envaudit.lock.fetch  # noqa\n")
    found = cli_bypasses(tmp_path)
    assert "envaudit/cli_data.py: imports envaudit.report.compare: not through commands/" in found
    assert "envaudit/cli_envs.py: imports envaudit.lock.fetch: not through commands/" in found
