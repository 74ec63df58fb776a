"""Which library imports of a solution a worker may make ahead of its load
(envaudit.schema.sources, leading_imports): only those that run before any code of its own."""

from __future__ import annotations

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
