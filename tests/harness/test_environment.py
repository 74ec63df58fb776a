"""The record's list of installed distributions is scanned once and kept while nothing on
sys.path changes, and scanned again as soon as something is installed, upgraded or removed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from envaudit.harness import environment


def _install(site: Path, name: str, version: str) -> Path:
    meta = site / f"{name}-{version}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return meta


def _bump(site: Path) -> None:
    """Move the folder's time forward: two changes within one clock tick leave it equal."""
    stat = site.stat()
    os.utime(site, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


def test_the_scan_is_kept_until_a_distribution_comes_changes_or_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path, str(tmp_path)])
    meta = _install(tmp_path, "envaudit-probe-one", "1.0")
    _bump(tmp_path)
    assert environment.distributions()["envaudit-probe-one"] == "1.0"
    first = environment._scanned
    assert environment.distributions()["envaudit-probe-one"] == "1.0"
    assert environment._scanned is first  # nothing changed: not scanned again

    _install(tmp_path, "envaudit-probe-two", "0.3")
    _bump(tmp_path)
    assert environment.distributions()["envaudit-probe-two"] == "0.3"

    meta.rename(tmp_path / "envaudit-probe-one-2.0.dist-info")
    (tmp_path / "envaudit-probe-one-2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: envaudit-probe-one\nVersion: 2.0\n"
    )
    _bump(tmp_path)
    assert environment.distributions()["envaudit-probe-one"] == "2.0"

    for folder in tmp_path.iterdir():
        for file in folder.iterdir():
            file.unlink()
        folder.rmdir()
    _bump(tmp_path)
    found = environment.distributions()
    assert "envaudit-probe-one" not in found and "envaudit-probe-two" not in found


def test_a_caller_cannot_change_the_kept_scan() -> None:
    environment.distributions()["torch"] = "0.0"
    assert environment.distributions().get("torch") != "0.0"
