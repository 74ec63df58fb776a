"""The harness is exactly its declared files (envaudit.schema.harness.HARNESS_FILES): they
import nothing but the standard library, torch and safetensors (NVML optionally), and a clean
interpreter given only a copy of them runs the worker's imports."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from envaudit.runtime.staging import staged_harness
from envaudit.schema.harness import HARNESS_FILES, SOURCE_ROOT, harness_hash

ALLOWED = set(sys.stdlib_module_names) | {"torch", "safetensors", "pynvml", "envaudit"}


def test_every_harness_module_is_declared() -> None:
    declared = set(HARNESS_FILES)
    for path in sorted((SOURCE_ROOT / "envaudit" / "harness").glob("*.py")):
        assert path.relative_to(SOURCE_ROOT).as_posix() in declared, path


def test_declared_files_import_only_stdlib_torch_safetensors() -> None:
    for relative in HARNESS_FILES:
        tree = ast.parse((SOURCE_ROOT / relative).read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] in ALLOWED, f"{relative} imports {name}"
                if name.startswith("envaudit"):
                    module = name.replace(".", "/")
                    assert f"{module}.py" in HARNESS_FILES or f"{module}/__init__.py" in (
                        HARNESS_FILES
                    ), f"{relative} imports {name}, which is not a declared harness file"


def test_a_clean_interpreter_runs_the_worker_from_the_staged_copy(tmp_path: Path) -> None:
    staged = staged_harness(tmp_path)
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*.py")) == sorted(
        HARNESS_FILES
    )
    assert harness_hash(staged) == harness_hash()
    probe = (
        "import sys, envaudit.harness.worker as w\n"
        "third = sorted({m.split('.')[0] for m in sys.modules} - set(sys.stdlib_module_names))\n"
        "print(w.__file__); print(' '.join(third))\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(staged)}
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(staged)!r})\n{probe}"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    where, third = done.stdout.splitlines()[:2]
    assert where.startswith(str(staged))
    # torch brings its own dependencies (numpy, sympy, ...); envaudit brings only its harness
    assert "pydantic" not in third.split() and "typer" not in third.split(), third
