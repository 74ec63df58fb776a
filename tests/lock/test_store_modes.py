"""Store entries are read by others than the user who fetched them: a container's non-root
worker or installer reads them through a build context or a find-links folder. Entries are
0644 and the store's folders 0755 whatever the fetching user's umask, checked by reading them
as an unprivileged user (needs root to switch users; skipped otherwise)."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envaudit.lock.store import Store
from envaudit.schema.locks import Artifact

NOBODY = 65534


@pytest.fixture
def open_folder() -> Iterator[Path]:
    """A folder every user may enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="envaudit-store-modes-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def strict_umask() -> Iterator[None]:
    old = os.umask(0o077)
    yield
    os.umask(old)


def readable_by_nobody(path: Path) -> bool:
    if os.getuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    done = subprocess.run(["cat", str(path)], user=NOBODY, capture_output=True, check=False)
    return done.returncode == 0


def test_an_entry_copied_in_is_readable_by_others(open_folder: Path, strict_umask: None) -> None:
    source = open_folder / "pkg-1.0-py3-none-any.whl"
    source.write_bytes(b"wheel bytes")
    source.chmod(0o644)
    data = source.read_bytes()
    artifact = Artifact(
        filename=source.name, size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    store = Store(open_folder / "store")
    store.root.mkdir()  # 0700 under this umask
    entry = store.copy_in(source, artifact, "pkg", "find-links")
    assert stat.S_IMODE(entry.stat().st_mode) == 0o644
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o755
    assert readable_by_nobody(entry)
    house = store.wheelhouse([artifact], open_folder / "house")
    assert stat.S_IMODE(house.stat().st_mode) == 0o755
    assert readable_by_nobody(house / artifact.filename)
