"""Where JIT-compiling libraries keep what they compile, for one job.

Triton, TorchInductor, torch's jiterator (the harness's fused input draw), FlashInfer, CuTe DSL
(FA4, quack), TileLang and DeepGEMM compile kernels at their first call and cache the result
under the user's home folder unless told otherwise. A shared home folder would let one environment's
compiled kernels (another library version, another compiler) be found by another's, and a
container's home is a throw-away tmpfs. So every job gets one cache
folder per environment closure, `<cache>/jit/<env>-<closure16>`, and every library's variable
points into it: mounted read-write into a container, used as is by a process on this machine.

A library whose own disk cache is off unless a variable turns it on (FlashAttention 4's CuTe DSL
kernels) gets it turned on (JIT_CACHE_SWITCHES), unless the lock or the caller set that
variable themselves. What a job started with (an empty folder: "cold"; a filled one: "warm")
goes on its lines, so a cold-cache and a warm-cache run of one solution can be compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from envaudit.settings import cache_root

# The variable each library reads, and its folder inside the job's cache folder.
JIT_CACHE_VARIABLES: dict[str, str] = {
    "XDG_CACHE_HOME": "xdg",  # libraries that follow the XDG layout (~/.cache/<name>)
    "TRITON_CACHE_DIR": "triton",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "PYTORCH_KERNEL_CACHE_PATH": "torch-kernels",  # jiterator's NVRTC-compiled kernels
    "FLASHINFER_WORKSPACE_BASE": "flashinfer",
    "CUTE_DSL_CACHE_DIR": "cute-dsl",
    "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": "flash-attention",  # used when FA4's own cache is on
    "TILELANG_CACHE_DIR": "tilelang",
    "TILELANG_TMP_DIR": "tilelang-tmp",
    "TVM_FFI_CACHE_DIR": "tvm-ffi",
    "TORCH_EXTENSIONS_DIR": "torch-extensions",  # cuda/cpp solutions (harness/solution.py)
    "DG_JIT_CACHE_DIR": "deep-gemm",  # else $HOME/.deep_gemm (csrc/jit/compiler.hpp)
}


def jit_cache_folder(env: str | None, closure_hash: str | None) -> Path:
    """The cache folder of one environment on this machine."""
    name = f"{env}-{closure_hash[:16]}" if env and closure_hash else (env or "no-env")
    return cache_root() / "jit" / name


JIT_CACHE_SWITCHES: dict[str, str] = {
    # FA4 compiles its kernels in every process unless this is "1" (flash_attn/cute/
    # cache_utils.py); a cached audit of its four dev solutions spent 18.9 s validating with it
    # off and 0.8 s with it on, on the H200 (docs/lab/audit-throughput.md, s51)
    "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "1",
}
"""Variables that turn a library's own compile cache on, and their value. The kernels it then
loads are those it would have compiled, from the environment's own folder."""


def jit_environment(folder: str, declared: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that send every library's compile cache into `folder` (as the worker sees
    it), and those that turn a cache on where `declared` (the variables the worker gets from the
    lock or the caller) does not set them already."""
    variables = {variable: f"{folder}/{sub}" for variable, sub in JIT_CACHE_VARIABLES.items()}
    kept = declared or {}
    variables.update({k: v for k, v in JIT_CACHE_SWITCHES.items() if k not in kept})
    return variables


def prepare_jit_cache(folder: Path, shared_with_other_users: bool = False) -> str:
    """Create the folder and its subfolders; "cold" when nothing was cached yet, else "warm"."""
    folder.mkdir(parents=True, exist_ok=True)
    state = "warm" if any(p.is_file() for p in folder.rglob("*")) else "cold"
    for sub in JIT_CACHE_VARIABLES.values():
        (folder / sub).mkdir(exist_ok=True)
        if shared_with_other_users:  # a container's worker is not this machine's user
            (folder / sub).chmod(0o777)
    if shared_with_other_users:
        folder.chmod(0o777)
    return state
