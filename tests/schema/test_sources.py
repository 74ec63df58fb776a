"""Which library imports of a solution's entry module a worker may make ahead of its load
(envaudit.schema.sources, leading_imports): only those before any code of the solution's own."""

from __future__ import annotations

from envaudit.schema.sources import leading_imports

OWN = ("main.py", "kernels/__init__.py", "helpers.py")


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
    assert leading_imports(source, OWN) == (
        "math",
        "torch.nn.functional",
        "einops",
        "flash_attn.cute",
    )


def test_a_variable_set_before_an_import_keeps_it_for_the_solution() -> None:
    source = 'import os\nos.environ["CUTE_DSL_ARCH"] = "sm_90a"\nimport cutlass\n'
    assert leading_imports(source.encode(), OWN) == ("os",)


def test_an_import_of_the_solutions_own_files_ends_them() -> None:
    assert leading_imports("import torch\nimport helpers\nimport natten\n", OWN) == ("torch",)
    assert leading_imports("from kernels.gemm import run\nimport natten\n", OWN) == ()
    assert leading_imports("import torch\nfrom . import kernels\nimport natten\n", OWN) == (
        "torch",
    )


def test_guarded_imports_and_sources_that_do_not_parse_give_none_of_theirs() -> None:
    guarded = "import torch\ntry:\n    import flashinfer\nexcept ImportError:\n    pass\n"
    assert leading_imports(guarded, OWN) == ("torch",)
    assert leading_imports("import torch\ndef broken(:\n", OWN) == ()
    assert leading_imports(b"\xff\xfe not python", OWN) == ()
    assert leading_imports('"""only a docstring"""\n', OWN) == ()
