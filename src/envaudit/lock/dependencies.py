"""Whether a lock has what a solution says it depends on (FlashInfer-Bench's
`spec.dependencies`: "torch", "flashinfer", "triton >= 3.3"), checked before any run: a missing
package is exit 2 naming it and the locks that have it, not an ImportError in every line.
Names that are toolchains or system libraries rather than Python packages (NON_PACKAGES) are
not checked against the lock's packages: the lock's CUDA toolchain and the torch stack's
nvidia-* wheels provide them. A `cuda` solution is compiled in its job: its lock must carry a
CUDA toolchain kept whole at run time (a [cuda] table with neither build_only nor
build_only_components) and ninja, else the same
exit 2 names the locks that do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from envaudit.errors import EnvauditError
from envaudit.lock.files import LockError, load_lock
from envaudit.schema.names import shown

NON_PACKAGES = frozenset({"cuda", "cudnn", "cublas", "cutlass", "nvcc", "cuda-toolkit", "nccl"})
ENV_MAP_HINT = "envs.toml"


class DependencyError(EnvauditError):
    """A solution names dependencies its environment's lock lacks (exit 2)."""


@dataclass(frozen=True)
class BuildTools:
    """What a solution's build needs of its lock beyond `spec.dependencies`: a cuda/cpp one is
    compiled in its job (harness/solution.py, build_native), with nvcc for cuda, and the
    TVM-FFI package for that binding (FlashInfer-Bench's default when `binding` is empty)."""

    language: str = ""
    binding: str = ""

    @property
    def native(self) -> bool:
        return self.language.lower() in ("cuda", "cpp")

    @property
    def needs_nvcc(self) -> bool:
        return self.language.lower() == "cuda"

    def packages(self) -> list[str]:
        tvm_ffi = self.native and (self.binding or "tvm-ffi").lower() == "tvm-ffi"
        return ["apache-tvm-ffi"] if tvm_ffi else []


def lock_packages(locks_dir: Path, env: str) -> set[str] | None:
    """The canonical names of the packages a lock pins (None: no readable lock of that name;
    making the env then says why, precisely)."""
    try:
        lock = load_lock(locks_dir / env)
    except LockError:
        return None
    return {canonicalize_name(package.name) for package in lock.packages}


def dependency_names(dependencies: Sequence[str] | None) -> list[str]:
    """The package names of `spec.dependencies` ("triton >= 3.3" -> "triton"), toolchains
    and system libraries (NON_PACKAGES) left out; a name that is no requirement is kept whole."""
    names: list[str] = []
    for text in dependencies or []:
        name: str
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            name = canonicalize_name(text.split()[0]) if text.split() else ""
        if name and name not in NON_PACKAGES:
            names.append(name)
    return names


def check_dependencies(
    solution: str,
    dependencies: Sequence[str] | None,
    env: str,
    locks_dir: Path,
    tools: BuildTools | None = None,
) -> None:
    """DependencyError (exit 2) when the lock of `env` lacks a package the solution names or
    its build needs (`tools`), or the run-time CUDA toolchain a cuda solution is compiled with."""
    tools = tools or BuildTools()
    if tools.needs_nvcc:
        check_run_time_toolchain(solution, env, locks_dir)
    wanted = dependency_names(dependencies) + tools.packages()
    if not wanted:
        return
    packages = lock_packages(locks_dir, env)
    if packages is None:
        return  # no lock of that name: making the env says so, precisely
    missing = [name for name in wanted if name not in packages]
    if not missing:
        return
    having = _locks_having(locks_dir, missing)
    where = "; ".join(f"{name}: {', '.join(having[name]) or 'no lock here'}" for name in missing)
    raise DependencyError(
        f"solution {shown(solution)} depends on {', '.join(missing)}, which lock {env} lacks",
        hint=f"locks that have them: {where}; choose one with --env or {ENV_MAP_HINT}"
        " beside the data",
    )


def run_time_toolchain(locks_dir: Path, env: str) -> bool | None:
    """Whether a lock keeps its whole CUDA toolchain in the run environment and pins ninja, which
    torch's extension builder drives (None: no readable lock). A toolchain kept in part
    (cuda.build_only_components: DeepGEMM's env keeps nvcc for its JIT but not the cuBLAS
    headers ATen's CUDA headers include) would turn the env's gap into the solution's
    COMPILE_ERROR, so it does not count."""
    try:
        lock = load_lock(locks_dir / env)
    except LockError:
        return None
    ninja = any(canonicalize_name(p.name) == "ninja" for p in lock.runtime_packages())
    cuda = lock.cuda
    return cuda is not None and not cuda.build_only and not cuda.build_only_components and ninja


def check_run_time_toolchain(solution: str, env: str, locks_dir: Path) -> None:
    if run_time_toolchain(locks_dir, env) is not False:
        return
    having = [
        lock.parent.name
        for lock in sorted(locks_dir.glob("*/lock.json"))
        if run_time_toolchain(locks_dir, lock.parent.name)
    ]
    raise DependencyError(
        f"solution {shown(solution)} is CUDA source compiled in its job, which needs nvcc and"
        f" ninja at run time; lock {env} keeps no whole CUDA toolchain there or pins no ninja",
        hint=f"locks that do: {', '.join(having) or 'none here'}; choose one with --env or"
        f" {ENV_MAP_HINT} beside the data",
    )


def _locks_having(locks_dir: Path, names: Sequence[str]) -> Mapping[str, list[str]]:
    found: dict[str, list[str]] = {name: [] for name in names}
    for lock in sorted(locks_dir.glob("*/lock.json")):
        packages = lock_packages(locks_dir, lock.parent.name) or set()
        for name in names:
            if name in packages:
                found[name].append(lock.parent.name)
    return found
