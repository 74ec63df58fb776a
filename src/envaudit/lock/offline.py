"""uv virtual environments made from the store alone: offline, `--no-index`, `--require-hashes`.

Shared by source builds (the isolated builder) and usable by the local runtime, so that both put
exactly the locked bytes into an environment and neither can reach an index by accident. The
CUDA toolchain (a lock's role-"cuda" packages) goes into a prefix of its own (`install_toolchain`),
never into a venv: its `nvidia/cu<major>` folder is CUDA_HOME.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from pathlib import Path

from envaudit.errors import EXIT_FAILED
from envaudit.lock.config import uv_binary
from envaudit.lock.files import LockError
from envaudit.lock.store import Store, damaged_entry_hint, shared_folder
from envaudit.schema.locks import Artifact

Pinned = tuple[str, str, Artifact]  # (name, version, artifact)


def uv_environment() -> dict[str, str]:
    """The caller's variables minus those that would point uv at another environment, and with
    Python downloads and uv config files switched off (what is used must be what is locked)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env.update(UV_PYTHON_DOWNLOADS="never", UV_NO_CONFIG="1")
    return env


def run_uv(argv: list[str], env: dict[str, str], failure: str, hint: str | None = None) -> None:
    """Run uv; a failure raises LockError (exit 2: the machine, not the lock) with uv's words."""
    done = subprocess.run(
        [uv_binary(), *argv], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise LockError(
            f"{failure}: uv {' '.join(argv[:2])}:\n{done.stderr.strip()[-2000:]}", 2, hint
        )


def create_venv(root: Path, python: str, env: dict[str, str], failure: str) -> Path:
    """A fresh venv for `python` (an installed interpreter: uv downloads none); its python."""
    hint = f"is Python {python} installed here? (uv does not download Pythons)"
    run_uv(["venv", "--quiet", "--python", python, str(root)], env, failure, hint)
    return root / "bin" / "python"


def install_from_store(
    python: Path,
    store: Store,
    packages: list[Pinned],
    env: dict[str, str],
    failure: str,
    target: Path | None = None,
    lock_env: str | None = None,
    compile_bytecode: bool = True,
) -> None:
    """Install exactly these artifacts (no dependencies, no index, every hash required) into
    python's environment, or with `target` into that folder (`--target`: files land at
    target/<top-level folder>, no venv around them); python then only says which wheels fit.
    An environment gets its bytecode compiled: a worker importing from it then never compiles
    a module's source itself, as it would on every start where PYTHONDONTWRITEBYTECODE is set
    or the environment is read-only to it (torch's import took 3.0 s from sources and 1.4 s
    from compiled bytecode on this project's CPU machine). `compile_bytecode=False` leaves it
    out where an environment serves one run (a bisect-env step): compiling took most of the 54
    s the torch-cpu environment's build took there, and a worker over a stack without bytecode
    keeps what it imports in envaudit's cache instead (supervision/launchers.py)."""
    if not packages:
        return
    with tempfile.TemporaryDirectory(prefix="envaudit-wheelhouse-") as tmp:
        houses = artifact_links(store, [a for _, _, a in packages])
        requirements = Path(tmp) / "requirements.txt"
        requirements.write_text(
            "".join(
                f"{name}=={version} --hash=sha256:{a.sha256}\n" for name, version, a in packages
            )
        )
        argv = ["pip", "install", "--quiet", "--python", str(python)]
        if target is not None:
            argv += ["--target", str(target)]
        elif compile_bytecode:
            argv += ["--compile-bytecode"]
        argv += ["--offline", "--no-index", "--require-hashes"]
        argv += [arg for house in houses for arg in ("--find-links", str(house))]
        argv += ["--no-deps", "-r", str(requirements)]
        try:
            run_uv(argv, env, failure)
        except LockError as exc:
            raise LockError(
                str(exc), exc.exit_code, damaged_entry_hint(str(exc), lock_env)
            ) from None


def artifact_links(store: Store, artifacts: list[Artifact]) -> list[Path]:
    """For each artifact, `<store>/links/<sha256>/`, holding one link to its entry named by its
    file name (installers want names): folders that stay where they are from one install to the
    next, as a temporary wheelhouse does not. uv keeps what it unpacked from a wheel by the
    wheel's path, so every install through a fresh folder unpacked torch's CPU wheel again
    (9.6 s on this project's CPU machine, against 0.9 s through the same links again)."""
    folders = []
    for artifact in artifacts:
        folder = store.root / "links" / artifact.sha256
        link = folder / artifact.filename
        if not link.is_symlink():
            shared_folder(folder)
            with contextlib.suppress(FileExistsError):  # another process made it meanwhile
                os.symlink(store.path_of(artifact).resolve(), link)
        folders.append(folder)
    return folders


def install_toolchain(
    prefix: Path,
    subdir: str,
    python: Path,
    store: Store,
    packages: list[Pinned],
    env: dict[str, str],
    failure: str,
) -> Path:
    """The CUDA toolchain into its own prefix, in one install (the component wheels share their
    top-level folder); its CUDA_HOME, prefix/subdir (`LockedCuda.prefix_subdir`), with the
    unversioned library links that linkers look for."""
    install_from_store(python, store, packages, env, failure, target=prefix)
    home = prefix / subdir
    if not (home / "bin").is_dir():
        raise LockError(
            f"{failure}: the CUDA toolchain's wheels left no {subdir}/bin in {prefix}",
            exit_code=EXIT_FAILED,
            hint="cuda.components must include nvidia-cuda-nvcc of the declared cuda.version",
        )
    expose_libraries(home)
    return home


def cuda_home(root: Path) -> Path | None:
    """CUDA 13 component wheels installed into a venv land in
    site-packages/nvidia/cu13/{bin,include,lib,nvvm}. (Locks made since the toolchain became a
    closure of its own install it with `install_toolchain` instead.)"""
    for candidate in sorted(root.glob("lib/python3*/site-packages/nvidia/cu1*")):
        if (candidate / "bin").is_dir():
            return candidate
    return None


def expose_libraries(home: Path) -> None:
    """The component wheels ship only versioned shared libraries (libcudart.so.13,
    libnvrtc.so.13); a linker's -lcudart or -lnvrtc looks for the unversioned name, so each gets
    one. The wheels put libraries in lib/, where nvcc's own profile links from lib64/ (CMake's
    CUDA compiler check links an executable against lib64's libcudadevrt.a and
    libcudart_static.a)."""
    lib = home / "lib"
    for versioned in sorted(lib.glob("lib*.so.[0-9]*")) if lib.is_dir() else []:
        stem, _, version = versioned.name.partition(".so.")
        plain = lib / f"{stem}.so"
        if version.isdigit() and not plain.exists() and not plain.is_symlink():
            plain.symlink_to(versioned.name)
    lib64 = home / "lib64"
    if not lib64.exists() and lib.is_dir():
        lib64.symlink_to("lib")
