"""What a solution's Python sources name that decides how its job is scheduled.

Standard library only: the fork server (envaudit.harness.forkserver) reads it to choose which
of its processes forks a job, and the audit (runtime/audit.py) to order its jobs.
"""

from __future__ import annotations

from pathlib import Path

COMPILER_MARKERS = ("torch.compile", "flex_attention", "torch._dynamo", "torch._inductor")
MARKER_SCAN_FILES = 200
MARKER_SCAN_BYTES = 1 << 20


def names_compiler(folder: Path) -> bool:
    """Whether the Python sources under a solution's folder mention torch.compile, FlexAttention,
    dynamo or inductor: such a solution needs what the fork server's preload imports
    (torch._dynamo alone takes 4.3 s in a fresh process on the H200 machine). A guess for
    scheduling only: a solution that reaches torch.compile through a library is not seen."""
    try:
        for path in sorted(folder.rglob("*.py"))[:MARKER_SCAN_FILES]:
            with path.open(errors="replace") as source:
                text = source.read(MARKER_SCAN_BYTES)
            if any(marker in text for marker in COMPILER_MARKERS):
                return True
    except OSError:
        pass
    return False
