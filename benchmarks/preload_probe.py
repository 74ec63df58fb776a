"""What a fork server could preload: each candidate import's time, and whether a child forked
after it can still use CUDA (torch marks every fork bad once CUDA's runtime has been asked
anything, a device count included, though torch.cuda.is_initialized() stays False).

    python benchmarks/preload_probe.py [--nvml-check]

--nvml-check sets PYTORCH_NVML_BASED_CUDA_CHECK=1 first (torch.cuda.is_available() then counts
devices through NVML). Also lists the CUDA-querying calls each import makes (sys.setprofile),
and whether bytecode is written and present for torch. Needs a CUDA build of torch for the
bad-fork mark; on a CPU build it prints n/a.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from types import FrameType
from typing import Any

CANDIDATES = ("torch._dynamo", "torch._inductor.compile_fx", "torch.nn.attention.flex_attention")
QUERIES = (
    "is_available",
    "device_count",
    "get_device_capability",
    "get_device_properties",
    "current_device",
    "_cuda_",
    "lazy_init",
)


def forks_bad(torch: Any) -> str:
    probe = getattr(torch._C, "_cuda_isInBadFork", None)
    if probe is None:
        return "n/a"
    pid = os.fork()
    if pid == 0:
        os._exit(1 if probe() else 0)
    return str(os.waitpid(pid, 0)[1] != 0)


def queries_made(name: str) -> tuple[float, dict[tuple[str, str, int], int]]:
    """Import `name`; its seconds and the CUDA-querying calls made meanwhile (name, caller)."""
    seen: dict[tuple[str, str, int], int] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "c_call"):
            return
        called = frame.f_code.co_name if event == "call" else getattr(arg, "__name__", "")
        if any(query in called for query in QUERIES):
            caller = frame.f_back if event == "call" and frame.f_back else frame
            where = caller.f_code.co_filename.split("site-packages/")[-1]
            key = (called, where, caller.f_lineno)
            seen[key] = seen.get(key, 0) + 1

    began = time.perf_counter()
    sys.setprofile(profile)
    try:
        importlib.import_module(name)
    finally:
        sys.setprofile(None)
    return time.perf_counter() - began, seen


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nvml-check", action="store_true")
    args = parser.parse_args()
    if args.nvml_check:
        os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    print(f"bytecode written: {not sys.dont_write_bytecode}; nvml check: {args.nvml_check}")
    began = time.perf_counter()
    import torch

    print(f"import torch: {time.perf_counter() - began:.2f} s ({torch.__version__})")
    cache = os.path.join(os.path.dirname(torch.__file__), "__pycache__")
    print(f"torch's __pycache__ present: {os.path.isdir(cache)}")
    for name in CANDIDATES:
        spent, seen = queries_made(name)
        print(
            f"{name}: {spent:.2f} s, initialised {torch.cuda.is_initialized()},"
            f" forks bad {forks_bad(torch)}"
        )
        for (called, where, line), count in sorted(seen.items()):
            print(f"    {count} x {called} from {where}:{line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
