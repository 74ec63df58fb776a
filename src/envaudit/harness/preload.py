"""The library modules a solution's first call would import, imported ahead of it.

Both the fork server (envaudit.harness.forkserver, into a second server its workers are forked
from) and a worker that was not forked from such a server (a container's, a fresh
interpreter's) import them before the solution is loaded; a worker does so before its gate
(envaudit.schema.progress), so a staged worker does it beside the previous job. These are
modules of the environment's own libraries, never a solution's code, and none of them touches
the GPU as it is imported.
"""

from __future__ import annotations

import contextlib
import importlib
import time
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


def preload_for(solution_folder: Path) -> float:
    """Import what the solution's sources name (envaudit.schema.sources); the seconds the
    imports took (next to nothing in a worker forked from a server that has them already), 0
    when the sources name none."""
    wanted = libraries_named(solution_folder)
    if not wanted:
        return 0.0
    began = time.perf_counter()
    import_modules(wanted)
    return time.perf_counter() - began
