"""Bytecode that the installer compiles is not drift: a wheel that ships
`__pycache__/*.pyc` beside its sources gets them rewritten by `uv pip install
--compile-bytecode` (as envaudit installs every environment), and `verify-env` must still
find the environment envaudit built equal to its lock. An edited source still fails."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from envaudit.lock.config import uv_binary
from envaudit.lock.verify import LockedDist, file_drift, installed_distributions, wheel_record
from envaudit.schema.locks import Artifact

TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}"


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def shipped_bytecode_wheel(folder: Path) -> Path:
    """tinypyc 1.0: one module and a stale `.pyc` of it, as some published wheels carry."""
    files = {
        "tinypyc/__init__.py": b"VALUE = 1\n",
        f"tinypyc/__pycache__/__init__.{TAG}.pyc": b"stale bytecode from the wheel's builder",
        "tinypyc-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypyc\nVersion: 1.0\n",
        "tinypyc-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [f"{path},{record_hash(data)},{len(data)}" for path, data in files.items()]
    record = "\n".join([*rows, "tinypyc-1.0.dist-info/RECORD,,"]) + "\n"
    wheel = folder / "tinypyc-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr("tinypyc-1.0.dist-info/RECORD", record)
    return wheel


def test_bytecode_the_installer_compiles_is_not_drift(tmp_path: Path) -> None:
    wheel = shipped_bytecode_wheel(tmp_path)
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never"}
    uv = uv_binary()
    subprocess.run([uv, "venv", str(venv), "--python", sys.executable], check=True, env=env)
    python = str(venv / "bin/python")
    install = [uv, "pip", "install", "--python", python, "--compile-bytecode", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, env=env)
    (have,) = [d for d in installed_distributions(python) if d.name == "tinypyc"]
    data = wheel.read_bytes()
    artifact = Artifact(
        filename=wheel.name, size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    want = LockedDist("tinypyc", "1.0", artifact)
    expected = wheel_record(wheel, want)
    pyc = have.location / f"tinypyc/__pycache__/__init__.{TAG}.pyc"
    assert pyc.read_bytes() != b"stale bytecode from the wheel's builder", "not recompiled"
    assert file_drift(want, have, expected) is None
    (have.location / "tinypyc/__init__.py").write_text("VALUE = 2\n")
    found = file_drift(want, have, expected)
    assert found is not None and found.examples == ("tinypyc/__init__.py",)


def test_a_damaged_store_entry_of_the_same_size_points_to_fetch_verify(tmp_path: Path) -> None:
    """A store entry of the right size and other bytes (disk damage) makes uv fail while it
    unpacks (`Bad uncompressed size`, `Failed to extract archive`): the error says which
    command finds and sets aside such entries."""
    from envaudit.lock.files import LockError
    from envaudit.lock.offline import create_venv, install_from_store, uv_environment
    from envaudit.lock.store import Store

    wheel = shipped_bytecode_wheel(tmp_path)
    data = wheel.read_bytes()
    artifact = Artifact(
        filename=wheel.name, size=len(data), sha256=hashlib.sha256(data).hexdigest()
    )
    store = Store(tmp_path / "store")
    (store.root / "sha256").mkdir(parents=True)
    damaged = bytearray(data)
    damaged[40] ^= 0xFF  # inside the first member's data: same size, other bytes
    store.path_of(artifact).write_bytes(bytes(damaged))
    env = uv_environment()
    python = create_venv(
        tmp_path / "venv", f"{sys.version_info.major}.{sys.version_info.minor}", env, "x"
    )
    try:
        install_from_store(python, store, [("tinypyc", "1.0", artifact)], env, "x", lock_env="e1")
    except LockError as exc:
        assert exc.hint is not None and "envaudit fetch e1 --verify" in exc.hint, exc.hint
    else:
        raise AssertionError("uv installed a damaged wheel")
