"""Load a solution and call it the way FlashInfer-Bench does.

Entry point `file.py::func`. Destination-passing style (the default): `func(*inputs, *outputs)`
with outputs preallocated by the harness; otherwise `func(*inputs)` returns the outputs. An
optional module-level `prepare(*inputs)` runs outside timing; its result is passed to every call
as the keyword argument `prepared`.

Languages `cuda` and `cpp` with the torch binding (FlashInfer-Bench's TorchBuilder; entry point
`main.cpp::run`, the symbol its pybind module exports) are compiled here, in the solution's
process and environment, before any workload: torch.utils.cpp_extension builds every
.cu/.cpp/.cc/.cxx/.c source with the sources' folder on the include path, `cuda` with the
environment's nvcc (CUDA_HOME) for the GPU's arch (or TORCH_CUDA_ARCH_LIST where no GPU is
seen). The build folder is named by (sources hash, arch) under TORCH_EXTENSIONS_DIR, which the
runtime points into the environment's own JIT cache folder (runtime/jit.py): a second job of the
same sources in the same environment loads the built module instead of compiling again. The
compiler's output is kept (`NativeBuild.log`); a failed build is a COMPILE_ERROR with it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envaudit.schema.sources import source_outside


class SolutionLoadError(RuntimeError):
    """The solution's sources could not be found, compiled or imported (COMPILE_ERROR)."""


class NoCompilerHere(SolutionLoadError):
    """The environment cannot compile this solution at all (a CPU build of torch, no nvcc):
    the environment's shortcoming, never the solution's COMPILE_ERROR (UNSUPPORTED_DEVICE)."""


@dataclass(frozen=True)
class NativeBuild:
    """What compiling a cuda/cpp solution cost and said: recorded on its result lines."""

    module: str
    arch: str
    seconds: float
    cached: bool
    log: str

    def record(self) -> dict[str, Any]:
        return {
            "module": self.module,
            "arch": self.arch,
            "seconds": round(self.seconds, 6),
            "cached": self.cached,
            "log": self.log,
        }


@dataclass
class LoadedSolution:
    name: str
    func: Callable[..., Any]
    prepare: Callable[..., Any] | None
    destination_passing: bool
    source_hash: str
    build: NativeBuild | None = None

    def call(self, inputs: Mapping[str, Any], outputs: list[Any] | None, prepared: Any) -> Any:
        args = list(inputs.values())
        if self.destination_passing:
            args += outputs or []
        if self.prepare is not None:
            return self.func(*args, prepared=prepared)
        return self.func(*args)


def source_files(solution: Mapping[str, Any], solution_dir: Path) -> dict[str, bytes]:
    """Relative path -> bytes of each source: inline `content`, or the file beside solution.json."""
    files: dict[str, bytes] = {}
    for source in solution["sources"]:
        rel = source["path"]
        outside = source_outside(solution_dir, rel)
        if outside is not None:
            raise SolutionLoadError(outside)
        if source.get("content") is not None:
            files[rel] = source["content"].encode()
        else:
            path = solution_dir / rel
            if not path.is_file():
                raise SolutionLoadError(f"source {rel} is missing from {solution_dir}")
            files[rel] = path.read_bytes()
    return files


def _prefix(name: str) -> str:
    """A short, plain form of a solution's name for a folder name: a name may be as long as a
    whole path component, and the folder's name adds to it."""
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in name[:40])
    return kept or "solution"


def hash_sources(files: Mapping[str, bytes]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return digest.hexdigest()


def load_solution(
    solution: Mapping[str, Any], files: Mapping[str, bytes], workroot: Path | None = None
) -> LoadedSolution:
    """Import the entry module from a private copy of the sources (`source_files`), so imports
    between the solution's own files work and nothing is written next to the originals; or,
    for `cuda` and `cpp`, compile them first (`build_native`). The copy goes under `workroot`
    (the worker's job folder, which the supervisor removes however the worker ended: a worker
    killed or ended with os._exit runs no atexit hook) or, without one, the temp folder."""
    if str(solution["spec"].get("language", "")).lower() in NATIVE_LANGUAGES:
        return build_native(solution, files, workroot)
    entry_file, func_name = solution["spec"]["entry_point"].split("::")
    if entry_file not in files:
        raise SolutionLoadError(f"entry file {entry_file} is not among the sources")
    workdir = Path(
        tempfile.mkdtemp(prefix=f"envaudit-{_prefix(str(solution['name']))}-", dir=workroot)
    )
    workdir.chmod(0o777)  # a container's worker made it; the host's supervisor removes it
    atexit.register(shutil.rmtree, workdir, True)
    for rel, data in files.items():
        (workdir / rel).parent.mkdir(parents=True, exist_ok=True)
        (workdir / rel).write_bytes(data)
    sys.path.insert(0, str(workdir))
    module_name = f"envaudit_solution_{hashlib.sha256(str(workdir).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(module_name, workdir / entry_file)
    if spec is None or spec.loader is None:
        raise SolutionLoadError(f"cannot import {entry_file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # an exit at import is a failure
        raise SolutionLoadError(
            f"importing {entry_file} failed: {type(exc).__name__}: {exc}"
        ) from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        raise SolutionLoadError(f"{entry_file} defines no function {func_name}")
    prepare = getattr(module, "prepare", None)
    return LoadedSolution(
        name=solution["name"],
        func=func,
        prepare=prepare if callable(prepare) else None,
        destination_passing=bool(solution["spec"].get("destination_passing_style", True)),
        source_hash=hash_sources(files),
    )


NATIVE_LANGUAGES = ("cuda", "cpp")
NATIVE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
LOG_TAIL = 8000
"""Characters of the compiler's output kept on a line (its end: where the errors are)."""


TORCH_BINDING = "torch"
TVM_FFI_BINDING = "tvm-ffi"
BINDINGS = (TORCH_BINDING, TVM_FFI_BINDING)


def native_binding(spec: Mapping[str, Any]) -> str:
    """The binding a cuda/cpp solution is built with: FlashInfer-Bench 0.1.2's default, when
    its spec names none, is TVM-FFI (its TVMFFIBuilder takes binding None or `tvm-ffi`)."""
    return str(spec.get("binding") or TVM_FFI_BINDING).lower()


def build_native(
    solution: Mapping[str, Any], files: Mapping[str, bytes], workroot: Path | None = None
) -> LoadedSolution:
    """Compile a cuda/cpp solution and take its entry symbol: with torch's extension builder
    (binding `torch`: a pybind module) or TVM-FFI's (binding `tvm-ffi`: a function exported with
    TVM_FFI_DLL_EXPORT_TYPED_FUNC, called with the tensors through DLPack). The build's log
    goes under `workroot` (the job folder) where there is one."""
    spec = solution["spec"]
    binding = native_binding(spec)
    if binding not in BINDINGS:
        raise SolutionLoadError(f"binding {binding!r} is not supported ({', '.join(BINDINGS)} are)")
    entry_file, symbol = str(spec["entry_point"]).split("::")
    if entry_file not in files:
        raise SolutionLoadError(f"entry file {entry_file} is not among the sources")
    with_cuda = str(spec["language"]).lower() == "cuda"
    _require_build_tools(with_cuda, binding)
    arch = _native_arch(with_cuda)
    source_hash = hash_sources(files)
    module = f"envaudit_{source_hash[:16]}_{arch}"  # a Python module's name: no '.', '-', '+'
    if binding == TVM_FFI_BINDING:
        module = f"{module}_tvmffi"

    build_dir = _extensions_root() / module
    sources_dir = build_dir / "src"
    for rel, data in files.items():
        target = sources_dir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
    compiled = sorted(str(sources_dir / rel) for rel in files if rel.endswith(NATIVE_SUFFIXES))
    cached = any(build_dir.glob(f"{module}*.so"))
    load = _load_extension if binding == TORCH_BINDING else _load_tvm_ffi
    began = time.perf_counter()
    with _captured_output(workroot) as log:
        try:
            extension = load(module, compiled, sources_dir, build_dir, with_cuda)
        except Exception as exc:  # the compiler's or the linker's failure, any exception type
            output = log.read()
            raise SolutionLoadError(
                f"building {entry_file} failed: {type(exc).__name__}: {_tail(str(exc))}"
                + (f"\ncompiler output:\n{_tail(output)}" if output.strip() else "")
            ) from exc
    seconds = time.perf_counter() - began
    try:
        func = getattr(extension, symbol, None)
    except Exception:  # a TVM-FFI module raises its own error for a name it lacks
        func = None
    if not callable(func):
        raise SolutionLoadError(f"the module built from {entry_file} exports no {symbol}")
    return LoadedSolution(
        name=str(solution["name"]),
        func=func,
        prepare=None,
        destination_passing=bool(spec.get("destination_passing_style", True)),
        source_hash=source_hash,
        build=NativeBuild(module, arch, seconds, cached, _tail(log.read())),
    )


def _load_extension(
    module: str, sources: list[str], include: Path, build_dir: Path, with_cuda: bool
) -> Any:
    from torch.utils import cpp_extension

    return cpp_extension.load(
        name=module,
        sources=sources,
        extra_include_paths=[str(include)],
        with_cuda=with_cuda,
        build_directory=str(build_dir),
        verbose=True,
    )


def _load_tvm_ffi(
    module: str, sources: list[str], include: Path, build_dir: Path, with_cuda: bool
) -> Any:
    """TVM-FFI's builder (ninja, the C++ compiler, nvcc from CUDA_HOME for `.cu` files, the arch
    from TVM_FFI_CUDA_ARCH_LIST, which _native_arch's list fills), then its module loader.
    apache-tvm-ffi is the solution's binding, in its environment only (the lock check asks for
    it): imported by name for this solution, as the solution's own modules are, never a
    dependency of the harness."""
    tvm_ffi = importlib.import_module("tvm_ffi")
    builder = importlib.import_module("tvm_ffi.cpp")
    if with_cuda:
        listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ")
        os.environ.setdefault("TVM_FFI_CUDA_ARCH_LIST", listed)
    library = builder.build(
        name=module,
        sources=sources,
        extra_include_paths=[str(include)],
        build_directory=str(build_dir),
    )
    return tvm_ffi.load_module(library)


def build_tools_missing(solution: Mapping[str, Any]) -> str | None:
    """Why this environment cannot build `solution` at all (NoCompilerHere's words), or None:
    a native solution's build tools, checked without building, so the judge can see for itself
    what the solution's process reports as UNSUPPORTED_DEVICE."""
    spec = solution["spec"]
    if str(spec.get("language", "")).lower() not in NATIVE_LANGUAGES:
        return None
    try:
        _require_build_tools(str(spec["language"]).lower() == "cuda", native_binding(spec))
    except NoCompilerHere as exc:
        return str(exc)
    return None


def unsupported_device(spec: Mapping[str, Any], device: Any) -> str | None:
    """Why the solution's declared target_hardware does not admit this device (empty or `any`
    admits every device), naming the device by its model, or None."""
    import torch

    declared = [str(t) for t in spec.get("target_hardware") or []]
    targets = [t.lower() for t in declared]
    if not targets or "any" in targets:
        return None
    if device.type == "cpu":
        return None if "cpu" in targets else f"targets {declared}; this run is on the CPU"
    props = torch.cuda.get_device_properties(device)
    name = props.name.lower()
    arch = f"sm_{props.major}{props.minor}"
    if any(t in ("cuda", "gpu", arch) or t.replace("nvidia_", "") in name for t in targets):
        return None
    return f"targets {declared}; this GPU is {props.name} ({arch})"


def _require_build_tools(with_cuda: bool, binding: str = TORCH_BINDING) -> None:
    """NoCompilerHere unless the binding's builder can work here: ninja (the environment's own,
    beside its python, comes first on PATH), TVM-FFI for that binding, and for CUDA a CUDA build
    of torch and an nvcc torch finds (CUDA_HOME or CUDA_PATH, nvcc on PATH, /usr/local/cuda:
    torch's own order)."""
    import torch
    from torch.utils import cpp_extension

    if binding == TVM_FFI_BINDING and importlib.util.find_spec("tvm_ffi") is None:
        raise NoCompilerHere(
            "this environment cannot build a TVM-FFI solution: apache-tvm-ffi is not installed"
        )

    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")
    if not cpp_extension.is_ninja_available():
        raise NoCompilerHere(
            "this environment cannot compile C++/CUDA: torch's extension builder needs ninja,"
            " which is neither in the environment nor on PATH"
        )
    if not with_cuda:
        return
    if torch.version.cuda is None:
        raise NoCompilerHere(
            f"this environment cannot compile CUDA: torch {torch.__version__} is not a CUDA build"
        )
    if cpp_extension.CUDA_HOME is None:
        raise NoCompilerHere(
            "this environment cannot compile CUDA: no CUDA toolkit (CUDA_HOME unset, no nvcc on"
            " PATH); run it in a lock whose [cuda] toolchain is kept at run time"
        )


def _native_arch(with_cuda: bool) -> str:
    """The arch the build is for, part of its folder's name and of the line: `sm90a` for
    TORCH_CUDA_ARCH_LIST `9.0a` (the GPU's when no list is set; compiling for a GPU needs no
    GPU, so a list alone serves a machine without one), `cpu` for a C++ build."""
    import torch

    if not with_cuda:
        return "cpu"
    if not os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip() and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        # Hopper and later: the arch-specific target (sm_90a), whose instructions (wgmma, TMA)
        # kernels written for that GPU use; the module is built for the GPU in hand only
        suffix = "a" if major >= 9 else ""
        os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}{suffix}"
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").replace(";", " ").split()
    if not listed:
        raise SolutionLoadError(
            "no GPU is visible and TORCH_CUDA_ARCH_LIST is unset: no arch to compile for"
        )
    return "_".join(arch_name(entry) for entry in listed)


def arch_name(entry: str) -> str:
    """`sm90a` for a TORCH_CUDA_ARCH_LIST entry `9.0a` (`+PTX` kept as `ptx`), the form
    nvcc's `sm_90a` takes in a module name."""
    plain = entry.lower().replace("+ptx", "ptx").replace(".", "")
    return "sm" + "".join(c for c in plain if c.isascii() and c.isalnum())


def _extensions_root() -> Path:
    """TORCH_EXTENSIONS_DIR (the environment's JIT cache folder), else a private temp folder."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        path = Path(root)
    else:
        path = Path(tempfile.mkdtemp(prefix="envaudit-extensions-"))
        atexit.register(shutil.rmtree, path, True)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _tail(text: str) -> str:
    return text if len(text) <= LOG_TAIL else "..." + text[-LOG_TAIL:]


class _Log:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> str:
        return self.path.read_text(errors="replace") if self.path.is_file() else ""


@contextlib.contextmanager
def _captured_output(workroot: Path | None = None) -> Iterator[_Log]:
    """The process's stdout and stderr (file descriptors 1 and 2, which the compiler's
    subprocesses inherit) into a file for the duration, then back. The file's folder goes
    under `workroot`, which the supervisor removes however the worker ends (a worker leaves
    with os._exit: no atexit hook runs), else in the temp folder."""
    folder = Path(tempfile.mkdtemp(prefix="envaudit-build-log-", dir=workroot))
    log = _Log(folder / "build.log")
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log.path, "wb") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield log
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    atexit.register(shutil.rmtree, folder, True)
