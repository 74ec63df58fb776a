"""What a solution's Python sources name that decides how its job is scheduled.

Standard library only: the fork server (envaudit.harness.forkserver) reads it to choose which
of its processes forks a job, and the audit (runtime/audit.py) to order its jobs.
"""

from __future__ import annotations

from pathlib import Path

COMPILER = "compiler"
TRITON = "triton"
MARKERS: dict[str, tuple[str, ...]] = {
    COMPILER: ("torch.compile", "flex_attention", "torch._dynamo", "torch._inductor"),
    TRITON: ("triton",),
}
MARKER_SCAN_FILES = 200
MARKER_SCAN_BYTES = 1 << 20


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
