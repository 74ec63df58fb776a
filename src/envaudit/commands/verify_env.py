"""`envaudit verify-env ENV`: an installed environment (an interpreter here, or the env inside
a container image) compared with its lock (lock/verify.py): versions, Python, and each file
against the locked wheel's RECORD where the wheel is in the store."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from envaudit.lock.config import FetchConfig
from envaudit.lock.files import env_dir, load_lock
from envaudit.lock.verify import Drift, compare, installed_distributions, python_version, render


@dataclass(frozen=True)
class VerifyRequest:
    env: str
    python: str | None = None
    """The interpreter to inspect (None: this one; with `image`, the image's env)."""
    image: str | None = None
    """Inspect inside this container image instead of on this machine."""
    exact: bool = False
    """Also fail on installed packages the lock does not name."""
    locks_dir: Path = Path("locks")
    store: Path | None = None
    """The store holding the locked wheels (None: ENVAUDIT_STORE)."""
    substitute: str | None = None
    """Compare with this declared substitute base's closure instead of the declared one."""


@dataclass(frozen=True)
class VerifyResult:
    drift: Drift
    exact: bool

    @property
    def failed(self) -> bool:
        """Drift (exit 1): another Python, a missing, other or changed package, or with
        --exact an extra one."""
        return self.drift.failed(self.exact)

    def text(self) -> str:
        """One line per finding, grouped by kind, then the summary line."""
        return render(self.drift, exact=self.exact)


def verify_environment(request: VerifyRequest) -> VerifyResult:
    """What is installed, hashed and compared with the lock."""
    locked = load_lock(env_dir(request.env, request.locks_dir), request.substitute)
    if request.image is not None:
        from envaudit.image.build import image_distributions  # the Docker SDK, only here

        installed, version = image_distributions(request.image, request.python)
    else:
        interpreter = request.python or sys.executable
        installed, version = installed_distributions(interpreter), python_version(interpreter)
    store = request.store or FetchConfig.from_environment().store
    return VerifyResult(compare(locked, installed, store, version), request.exact)
