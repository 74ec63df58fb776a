"""Where envaudit keeps what it makes on this machine (environment variables it reads).

- ENVAUDIT_CACHE: environments, staged harness copies, job folders, build contexts
  (default ~/.cache/envaudit). The store and the engine have their own variables
  (envaudit.lock.config, envaudit.image.engine).
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("ENVAUDIT_CACHE") or os.path.expanduser("~/.cache/envaudit"))
