"""`envaudit verify-env` against a real lock (uv resolves six and idna) and real venvs."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.config import FetchConfig, uv_binary
from envaudit.lock.files import load_lock, write_lock
from envaudit.lock.resolve import lock_env
from envaudit.lock.verify import LIST_SCRIPT, InstalledDist, compare, parse_listing, version_drift
from envaudit.schema.locks import Artifact, LockedSource
from tests.conftest import base_recipe_for

BASES = Path(__file__).resolve().parents[2] / "containers/bases"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
ENV_TOML = f"""
python = "{PYTHON}"
platform = "x86_64-manylinux_2_28"
base = {{ recipe = "{base_recipe_for(PYTHON)}" }}
requirements = ["six==1.17.0", "idna==3.10"]
"""


def uv(*args: str) -> None:
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([uv_binary(), *args], check=True, capture_output=True, env=env)


@pytest.fixture(scope="module")
def locks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("locks")
    folder = root / "tiny"
    folder.mkdir()
    (folder / "env.toml").write_text(ENV_TOML)
    config = FetchConfig.from_environment(store=root / "unused-store")
    write_lock(folder, lock_env(folder, config, bases_dir=BASES))
    return root


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("base") / "venv"
    uv("venv", str(venv), "--python", sys.executable)
    uv("pip", "install", "--python", str(venv / "bin/python"), "six==1.17.0", "idna==3.10")
    return venv


@pytest.fixture(scope="module")
def six_store(tmp_path_factory: pytest.TempPathFactory, locks_dir: Path) -> Path:
    """A store holding the locked six wheel, downloaded by pip (run through uv)."""
    download = tmp_path_factory.mktemp("download")
    uv("tool", "run", "pip", "download", "six==1.17.0", "--no-deps", "-d", str(download))
    (wheel,) = download.glob("six-*.whl")
    (locked,) = [p for p in load_lock(locks_dir / "tiny").packages if p.name == "six"]
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == locked.artifact.sha256
    store = tmp_path_factory.mktemp("store")
    (store / "sha256").mkdir()
    shutil.copyfile(wheel, store / "sha256" / locked.artifact.sha256)
    return store


@pytest.fixture
def venv(base_venv: Path, tmp_path: Path) -> Path:
    """A private copy of the matching venv, free to break."""
    return Path(shutil.copytree(base_venv, tmp_path / "venv", symlinks=True))


def verify(locks_dir: Path, python: Path | str, store: Path, *extra: str) -> tuple[int, str]:
    argv = ["verify-env", "tiny", "--python", str(python), "--locks-dir", str(locks_dir)]
    result = CliRunner().invoke(app, [*argv, "--store", str(store), *extra])
    return result.exit_code, result.output


def test_matching_environment_passes(locks_dir: Path, venv: Path, tmp_path: Path) -> None:
    code, output = verify(locks_dir, venv / "bin/python", tmp_path / "empty-store")
    assert code == 0, output
    assert "verify-env tiny: 2 locked, 2 match, 0 missing, 0 different" in output
    assert "hash not checked for 2 (artifact not in the store)" in output


def test_other_version_fails_naming_both(locks_dir: Path, venv: Path, tmp_path: Path) -> None:
    uv("pip", "install", "--python", str(venv / "bin/python"), "idna==3.9")
    code, output = verify(locks_dir, venv / "bin/python", tmp_path / "empty-store")
    assert code == 1, output
    assert "different version: idna locked 3.10, installed 3.9" in output


def test_missing_package_fails(locks_dir: Path, venv: Path, tmp_path: Path) -> None:
    uv("pip", "uninstall", "--python", str(venv / "bin/python"), "six")
    code, output = verify(locks_dir, venv / "bin/python", tmp_path / "empty-store")
    assert code == 1, output
    assert "missing: six==1.17.0" in output


def test_extra_package_fails_only_with_exact(locks_dir: Path, venv: Path, tmp_path: Path) -> None:
    uv("pip", "install", "--python", str(venv / "bin/python"), "certifi==2024.8.30")
    code, output = verify(locks_dir, venv / "bin/python", tmp_path / "empty-store")
    assert code == 0, output
    assert "extra (not in the lock): certifi==2024.8.30" in output
    assert "1 extra (not failing)" in output
    code, output = verify(locks_dir, venv / "bin/python", tmp_path / "empty-store", "--exact")
    assert code == 1, output
    assert "certifi" in output


def test_edited_file_fails_when_the_wheel_is_in_the_store(
    locks_dir: Path, venv: Path, six_store: Path
) -> None:
    code, output = verify(locks_dir, venv / "bin/python", six_store)
    assert code == 0, output
    assert "hashes checked for 1" in output
    (six_py,) = venv.glob("lib/python*/site-packages/six.py")
    with six_py.open("a") as handle:
        handle.write("# edited after installation\n")
    code, output = verify(locks_dir, venv / "bin/python", six_store)
    assert code == 1, output
    assert "changed files: six==1.17.0: 1 of" in output
    assert "(six.py)" in output


def test_files_hashed_where_they_are_are_compared(
    locks_dir: Path, venv: Path, six_store: Path
) -> None:
    """The listing `verify-env --image` takes in a container: each RECORD file hashed by the
    inspected interpreter itself, so the comparison needs no access to the files (here: a
    location this process cannot read); an edit is found from those hashes alone."""
    python = str(venv / "bin/python")

    def listed() -> list[InstalledDist]:
        argv = [python, "-c", LIST_SCRIPT, "records", "disk"]
        done = subprocess.run(argv, capture_output=True, text=True, check=True)
        return [
            replace(d, location=Path("/nonexistent")) for d in parse_listing(python, done.stdout)
        ]

    lock = load_lock(locks_dir / "tiny")
    drift = compare(lock, listed(), six_store)
    assert drift.hashes_checked == ["six"] and not drift.changed_files
    (six_py,) = venv.glob("lib/python*/site-packages/six.py")
    with six_py.open("a") as handle:
        handle.write("# edited after installation\n")
    [changed] = compare(lock, listed(), six_store).changed_files
    assert (changed.name, changed.examples) == ("six", ("six.py",))


def test_interpreter_that_does_not_exist_is_a_usage_error(locks_dir: Path, tmp_path: Path) -> None:
    code, output = verify(locks_dir, tmp_path / "no/bin/python", tmp_path / "empty-store")
    assert code == 2
    assert "error: --python" in output and "no/bin/python" in output


def test_built_source_wheels_count_as_locked(locks_dir: Path) -> None:
    lock = load_lock(locks_dir / "tiny")
    built = LockedSource(
        name="Foo_Bar",
        kind="git",
        rev="0" * 40,
        wheel=Artifact(filename="foo_bar-1.2-py3-none-any.whl", size=1, sha256="0" * 64),
        status="built",
    )
    drift = compare(lock.model_copy(update={"sources": [built]}), [], store=None)
    assert drift.locked == 3
    assert {f"{d.name}=={d.version}" for d in drift.missing} == {
        "foo-bar==1.2",
        "idna==3.10",
        "six==1.17.0",
    }


@pytest.mark.parametrize(
    ("locked", "installed", "expected"),
    [
        ("1.0", "1.0.0", None),
        ("2.11.0", "2.11.0+cu130", "different build"),
        ("2.11.0+cpu", "2.11.0+cu130", "different build"),
        ("3.10", "3.9", "different version"),
    ],
)
def test_version_drift(locked: str, installed: str, expected: str | None) -> None:
    assert version_drift(locked, installed) == expected


def test_other_python_version_is_drift(locks_dir: Path) -> None:
    """A lock for another Python than the interpreter's is drift, whatever the packages."""
    from envaudit.lock.files import load_lock
    from envaudit.lock.verify import compare, render

    lock = load_lock(locks_dir / "tiny")
    drift = compare(lock, [], None, python_version="2.7")
    assert drift.python == (lock.python, "2.7") and drift.failed()
    assert f"different python: locked {lock.python}, interpreter 2.7" in render(drift)


def test_a_source_built_in_the_image_matches_by_name(locks_dir: Path) -> None:
    """A surveyed source has no wheel in the lock: the image compiles it from the locked tree.
    Installed, it is one of the locked (not an extra, even with --exact), its files unchecked
    with the reason; not installed, nothing claims it matched."""
    from envaudit.lock.verify import BUILT_IN_PLACE, InstalledDist, render

    lock = load_lock(locks_dir / "tiny")
    surveyed = LockedSource(name="Flash_MLA", kind="git", rev="0" * 40, status="surveyed")
    lock = lock.model_copy(update={"sources": [surveyed]})
    here = Path("/site-packages")
    stack = [InstalledDist("idna", "3.10", here, None), InstalledDist("six", "1.17.0", here, None)]
    built = InstalledDist("flash-mla", "1.0.0+9241ae3", here, None)
    drift = compare(lock, [*stack, built], store=None)
    assert not drift.failed(exact=True), render(drift, exact=True)
    assert (drift.locked, drift.extra) == (3, [])
    assert drift.hashes_not_checked["flash-mla"] == BUILT_IN_PLACE
    without = compare(lock, stack, store=None)
    assert without.locked == 2 and "flash-mla" not in without.matching
