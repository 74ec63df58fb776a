"""Which library imports of a solution a worker may make ahead of its load
(envaudit.schema.sources, leading_imports): only those that run before any code of its own;
and whether one of them is a library no worker has already (imports_libraries_first)."""

from __future__ import annotations

import json
from pathlib import Path

from envaudit.schema.sources import leading_imports


def leading(main: str, **others: str) -> tuple[str, ...]:
    """The leading imports of a solution whose main.py is `main`, beside files named by the
    keywords (`kernels__init__` stands for kernels/__init__.py)."""
    files = {"main.py": main.encode()}
    for name, text in others.items():
        path = name.replace("__init__", "/__init__.py") if "__init__" in name else f"{name}.py"
        files[path] = text.encode()
    return leading_imports(files, "main.py")


def test_the_imports_before_the_first_statement_of_the_solution() -> None:
    source = '''"""A docstring."""
from __future__ import annotations
import math
import torch.nn.functional as F, einops
from flash_attn.cute import flash_attn_func, utils as fa_utils
import math
HEAD_DIM = 64
import tilelang
'''
    assert leading(source) == ("math", "torch.nn.functional", "einops", "flash_attn.cute")


def test_a_variable_set_before_an_import_keeps_it_for_the_solution() -> None:
    source = 'import os\nos.environ["CUTE_DSL_ARCH"] = "sm_90a"\nimport cutlass\n'
    assert leading(source) == ("os",)


def test_an_own_module_contributes_its_leading_imports_and_ends_them() -> None:
    helpers = "import triton\nimport triton.language as tl\nBLOCK = 128\nimport natten\n"
    assert leading(
        "import torch\nimport helpers, flashinfer\nimport natten\n", helpers=helpers
    ) == (
        "torch",
        "triton",
        "triton.language",
    )
    package = "from . import gemm\n"
    assert leading("from kernels.gemm import run\nimport natten\n", kernels__init__=package) == ()
    assert leading("import torch\nfrom . import kernels\nimport natten\n") == ("torch",)
    # one that imports the entry back is not read twice
    assert leading("import torch\nimport helpers\n", helpers="import main\nimport natten\n") == (
        "torch",
    )


def test_guarded_imports_and_sources_that_do_not_parse_give_none_of_theirs() -> None:
    guarded = "import torch\ntry:\n    import flashinfer\nexcept ImportError:\n    pass\n"
    assert leading(guarded) == ("torch",)
    assert leading("import torch\ndef broken(:\n") == ()
    assert leading_imports({"main.py": b"\xff\xfe not python"}, "main.py") == ()
    assert leading('"""only a docstring"""\n') == ()
    assert leading_imports({"other.py": b"import torch\n"}, "main.py") == ()


def solution_file(folder: Path, sources: dict[str, str], inline: bool = False) -> Path:
    """A solution.json whose entry is main.py::run, its sources written beside it or inline."""
    folder.mkdir(parents=True, exist_ok=True)
    listed = []
    for rel, text in sources.items():
        if inline:
            listed.append({"path": rel, "content": text})
        else:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
            listed.append({"path": rel})
    spec = {"language": "python", "entry_point": "main.py::run"}
    path = folder / "solution.json"
    solution = {"name": folder.name, "definition": "d", "author": "t", "spec": spec}
    path.write_text(json.dumps({**solution, "sources": listed}))
    return path


def libraries_first(solution_json: Path) -> bool:
    """imports_libraries_first of a solution.json, read as the audit reads it."""
    from envaudit.runtime.jobs import find_solution
    from envaudit.runtime.scheduling.audit import solution_imports_libraries_first

    return solution_imports_libraries_first(*find_solution(str(solution_json), Path()))


def test_a_library_imported_first_is_told_apart_from_what_every_worker_has(
    tmp_path: Path,
) -> None:
    """An audit stages deeper only for solutions whose workers import a library of their own
    before the gate: the standard library, torch, Triton, NumPy and safetensors do not count,
    nor does a library imported after the solution's own first line."""
    plain = "import math\nimport torch\nimport triton.language as tl\nimport numpy as np\n"
    cases = {
        "fa4": ("import torch\nfrom flash_attn.cute import flash_attn_func\n", {}, True),
        "helper": ("import torch\nimport kernel\n", {"kernel.py": "import tilelang\n"}, True),
        "plain": (plain + "def run(x):\n    return x\n", {}, False),
        "late": ("import torch\nSCALE = 2\nimport flashinfer\n", {}, False),
    }
    for name, (main, others, expected) in cases.items():
        for inline in (False, True):
            path = solution_file(tmp_path / f"{name}-{inline}", {"main.py": main, **others}, inline)
            assert libraries_first(path) is expected, (name, inline)


def test_a_solution_that_cannot_be_read_imports_no_library_first(tmp_path: Path) -> None:
    """Its job's load reports the problem; the audit's staging just does not count it. (A
    solution.json that is absent or not JSON stops the audit earlier, in find_solution.)"""
    missing = solution_file(tmp_path / "missing", {"main.py": "import flash_attn.cute\n"})
    (missing.parent / "main.py").unlink()
    outside = solution_file(tmp_path / "outside", {"main.py": "import flash_attn.cute\n"}, True)
    spec = json.loads(outside.read_text())
    spec["sources"] = [{"path": "../main.py", "content": "import flash_attn.cute\n"}]
    outside.write_text(json.dumps(spec))
    for path in (missing, outside):
        assert libraries_first(path) is False, path
