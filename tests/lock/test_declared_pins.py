"""A substitute over the declared Python is resolved with the declared closure's versions as
constraints (lock/resolve.py declared_pins), so its files are the declared ones whenever it is
locked; a substitute of another Python, and the declared closure itself, are resolved freely."""

from __future__ import annotations

import shutil
from pathlib import Path

from envaudit.lock.files import load_lock, load_spec
from envaudit.lock.resolve import declared_pins
from tests.conftest import REPO

FOLDER = REPO / "locks" / "sglang-0.5.22"


def test_same_python_takes_the_declared_versions() -> None:
    spec = load_spec(FOLDER, "gpu-host-os")
    pins = declared_pins(FOLDER, spec, "gpu-host-os")
    declared = load_lock(FOLDER)
    anthropic = next(p for p in declared.packages if p.name == "anthropic")
    assert f"anthropic=={anthropic.version}" in pins
    assert "cuda-tile==1.6.0rc5" in pins  # an sdist-only dependency, pinned the same way
    assert not any(p.startswith(("torch==", "sglang==")) for p in pins)  # env.toml pins them


def test_no_pins_for_the_declared_closure_or_another_python() -> None:
    assert declared_pins(FOLDER, load_spec(FOLDER), None) == []
    assert declared_pins(FOLDER, load_spec(FOLDER, "trixie-devbase"), "trixie-devbase") == []


def test_no_pins_from_a_stale_declared_lock(tmp_path: Path) -> None:
    folder = tmp_path / "sglang-0.5.22"
    shutil.copytree(FOLDER, folder)
    toml = folder / "env.toml"
    toml.write_text(toml.read_text().replace('"numpy==2.3.5",', '"numpy==2.3.4",'))
    assert declared_pins(folder, load_spec(folder, "gpu-host-os"), "gpu-host-os") == []
