"""What the harness is made of: the one declaration of its files.

They are hashed into every result line (harness_hash), staged and mounted read-only into every
container and local environment (the runtime), and a clean interpreter given only these files
must be able to run the worker (tests/harness/test_isolation.py). The harness imports only the
standard library, torch and safetensors, so every file listed here does too.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# Paths relative to the folder that holds the `envaudit` package (src/).
HARNESS_FILES = (
    "envaudit/__init__.py",
    "envaudit/errors.py",
    "envaudit/harness/__init__.py",
    "envaudit/harness/compare.py",
    "envaudit/harness/context.py",
    "envaudit/harness/environment.py",
    "envaudit/harness/evaluate.py",
    "envaudit/harness/forkserver.py",
    "envaudit/harness/inputs.py",
    "envaudit/harness/judge.py",
    "envaudit/harness/preload.py",
    "envaudit/harness/reference.py",
    "envaudit/harness/solution.py",
    "envaudit/harness/timed_calls.py",
    "envaudit/harness/timing.py",
    "envaudit/harness/witness.py",
    "envaudit/harness/worker.py",
    "envaudit/schema/__init__.py",
    "envaudit/schema/harness.py",
    "envaudit/schema/options.py",
    "envaudit/schema/dtypes.py",
    "envaudit/schema/expressions.py",
    "envaudit/schema/paths.py",
    "envaudit/schema/progress.py",
    "envaudit/schema/reading.py",
    "envaudit/schema/results.py",
    "envaudit/schema/sources.py",
)

SOURCE_ROOT = Path(__file__).resolve().parents[2]
"""The folder holding the `envaudit` package, where the listed paths start."""


def harness_hash(root: Path = SOURCE_ROOT) -> str:
    """sha256 over the declared files (relative path and bytes), in declared order."""
    digest = hashlib.sha256()
    for relative in HARNESS_FILES:
        digest.update(relative.encode() + b"\0" + (root / relative).read_bytes())
    return digest.hexdigest()
