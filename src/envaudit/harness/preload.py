"""The library modules a solution's load and first call would import, imported ahead of them.

Both the fork server (envaudit.harness.forkserver, into a second server its workers are forked
from) and a worker that was not forked from such a server (a container's, a fresh
interpreter's) import PRELOAD's before the solution is loaded; a worker does so before its gate
(envaudit.schema.progress), so a staged worker does it beside the previous job. These are
modules of the environment's own libraries, never a solution's code, and none of them touches
the GPU as it is imported. The worker then imports the libraries the solution's entry module
imports before any code of its own (envaudit.schema.sources, leading_imports): FlashAttention
4's CuTe DSL, FlashInfer, TileLang, NATTEN and the like, which the solution's load would
otherwise import after the gate. Those may initialise CUDA as they are imported (FA4's
flash_attn.cute does), which a worker can afford (its own context is being made meanwhile) and a
fork server cannot (a fork after it cannot use CUDA: benchmarks/import_probe.py), so only
workers import them.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from envaudit.schema.sources import COMPILER, TRITON, libraries_named

PRELOAD: tuple[tuple[str, str | None, str], ...] = (
    ("torch._dynamo", None, COMPILER),
    ("torch._inductor.compile_fx", None, COMPILER),
    ("torch.nn.attention.flex_attention", None, COMPILER),
    ("triton.runtime.cache", "triton_key", TRITON),
    ("triton.compiler.compiler", "triton_key", TRITON),
    ("triton.experimental.gluon", None, TRITON),
)
"""(module, function to call once, what a solution's sources name for it to be worth
importing). torch.compile and FlexAttention import torch._dynamo on first use, which took most
of a FlexAttention solution's 4.7 s load on the H200 machine, and Inductor's compiler on the
first compiled call (3.4 s on the H200 machine, 3.8 s on this project's CPU machine; no thread;
its cache folders are read from the environment when it compiles, so each worker's own JIT
folders hold what it compiles: tested). Triton's first launch in a process hashes Triton's own
files (`triton_key`, memoised per process; 0.6 s on the H200 machine), which a forked child
inherits; recent Triton (3.6 there) keeps it in triton.runtime.cache, older Triton in
triton.compiler.compiler, so both are tried. The same first launch imports Triton's Gluon
language while specialising its arguments: 0.17-0.18 s of a forked child's first launch of a
cached kernel (0.2 s) on the H200 machine (benchmarks/first_call_probe.py). A solution that
uses the compiler also runs what Inductor makes with Triton, so COMPILER takes every entry."""


def import_modules(wanted: frozenset[str] = frozenset({COMPILER, TRITON})) -> None:
    """Import the PRELOAD entries for `wanted`; what cannot be imported is left to the
    solution, which would then fail to import it itself."""
    for name, call, library in PRELOAD:
        if library not in wanted and COMPILER not in wanted:
            continue  # a compiled solution runs Inductor's Triton kernels too
        with contextlib.suppress(Exception):
            module = importlib.import_module(name)
            if call is not None:
                getattr(module, call)()


def preload_for(solution_folder: Path, leading: Sequence[str] = ()) -> float:
    """Import what the solution's sources name (envaudit.schema.sources), then the `leading`
    imports of its entry module (leading_imports); the seconds the imports took (next to
    nothing for modules already imported, as in a worker forked from a server that has them),
    0 when there was nothing to import. A module that fails to import is left to the solution,
    whose own import then fails as it would have."""
    wanted = libraries_named(solution_folder)
    leading = [name for name in leading if name not in sys.modules]
    if not wanted and not leading:
        return 0.0
    began = time.perf_counter()
    if wanted:
        import_modules(wanted)
    for name in leading:
        with contextlib.suppress(Exception, SystemExit):
            importlib.import_module(name)
    return time.perf_counter() - began
