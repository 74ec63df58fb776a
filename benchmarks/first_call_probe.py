"""What a forked worker's first calls cost on a GPU, and what its parent could load for them.

Each candidate runs in a parent process of its own that imports what a preloaded fork server
has (torch, Triton's `triton_key`) plus the candidate, then forks children that each make a
CUDA context and time, once each: the context, the first torch op, the first launch of a Triton
kernel whose compile is cached, one more launch of it, the first launch of a second cached
kernel, and a first and second cuBLAS matmul. One child per candidate repeats the first Triton
launch under cProfile, for where it goes. A child first fills a fresh Triton cache, so every
Triton launch timed finds its kernel compiled. Whether a fork is still usable after the
candidate (torch's bad-fork mark) is printed too: a candidate that breaks it is worthless.

    python benchmarks/first_call_probe.py [--json OUT.json] [--children N]

Candidates: `server` (the preloaded server as it is), `driver` (also Triton's active driver
and its `utils` module, `triton.runtime.driver.active.utils`), `cublas-lib` (also
`ctypes.CDLL` of torch's cuBLAS and cuBLASLt, loading their code without CUDA), `gluon` (also
`triton.experimental.gluon`, which a first launch imports), `compiler` (also what the fork
server preloads for torch.compile: dynamo, Inductor's compiler, FlexAttention). Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

KERNELS = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1, mask=mask)


@triton.jit
def scale(x_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)
"""

CANDIDATES = ("server", "driver", "cublas-lib", "gluon", "compiler")
N = 1 << 20


def prepare_parent(candidate: str) -> None:
    """What the parent holds before it forks: a preloaded server's imports, then the candidate."""
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch
    import triton

    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        from triton.compiler.compiler import triton_key
    triton_key()
    if candidate == "driver":
        triton.runtime.driver.active.utils  # noqa: B018 - creating it is the point
    elif candidate == "gluon":
        import triton.experimental.gluon
    elif candidate == "compiler":
        import torch._dynamo
        import torch._inductor.compile_fx
        import torch.nn.attention.flex_attention
    elif candidate == "cublas-lib":
        import ctypes
        import glob

        lib = Path(torch.__file__).parent / "lib"
        roots = [str(lib), *(p for p in sys.path if "site-packages" in p)]
        for root in roots:
            for pattern in (
                "libcublas*.so*",
                "nvidia/cu*/lib/libcublas*.so*",
                "nvidia/cublas/lib/libcublas*.so*",
            ):
                for path in glob.glob(os.path.join(root, pattern)):
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def bad_fork() -> bool:
    import torch

    pid = os.fork()
    if pid == 0:
        os._exit(1 if torch._C._cuda_isInBadFork() else 0)
    return os.waitpid(pid, 0)[1] != 0


def child(kernels: Any, profiled: bool) -> dict[str, Any]:
    """In a forked child: each first call's seconds (or the profile of the first Triton one)."""
    import torch

    seconds: dict[str, float] = {}

    def timed(name: str, call: Any) -> None:
        began = time.perf_counter()
        call()
        torch.cuda.synchronize()
        seconds[name] = time.perf_counter() - began

    timed("cuda_context", lambda: (torch.cuda.set_device(0), torch.cuda.init()))
    timed("first_torch_op", lambda: torch.zeros(N, device="cuda").add_(1))
    x = torch.zeros(N, device="cuda")
    grid = (N // 1024,)
    if profiled:
        import cProfile
        import io
        import pstats

        profile = cProfile.Profile()
        profile.enable()
        kernels.add_one[grid](x, N, BLOCK=1024)
        torch.cuda.synchronize()
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(18)
        return {"profile": text.getvalue()}
    timed("triton_first", lambda: kernels.add_one[grid](x, N, BLOCK=1024))
    timed("triton_again", lambda: kernels.add_one[grid](x, N, BLOCK=1024))
    timed("triton_second_kernel", lambda: kernels.scale[grid](x, N, 2.0, BLOCK=1024))
    a = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    timed("cublas_first", lambda: a @ a)
    timed("cublas_again", lambda: a @ a)
    return seconds


def run_parent(candidate: str, folder: Path, children: int) -> dict[str, Any]:
    """Runs in the parent process: prepare, then fork the children one after another."""
    sys.path.insert(0, str(folder))
    began = time.perf_counter()
    prepare_parent(candidate)
    record: dict[str, Any] = {"candidate": candidate, "parent_s": time.perf_counter() - began}
    import kernels_under_probe as kernels

    record["bad_fork"] = bad_fork()
    runs = []
    for index in range(children + 1 if children else 1):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                result = child(kernels, profiled=bool(children) and index == children)
            except Exception as exc:  # the record says what broke
                result = {"error": repr(exc)}
            os.write(write, json.dumps(result).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            result = json.loads(pipe.read() or "{}")
        os.waitpid(pid, 0)
        if "profile" in result:
            record["profile"] = result["profile"]
        else:
            runs.append(result)
    record["runs"] = runs
    return record


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--children", type=int, default=3)
    parser.add_argument("--parent", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.parent:
        print(json.dumps(run_parent(args.parent, Path(args.folder), args.children)))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="first-call-"))
    (folder / "kernels_under_probe.py").write_text(KERNELS)
    env = {**os.environ, "TRITON_CACHE_DIR": str(folder / "triton-cache")}
    me = [sys.executable, __file__, "--folder", str(folder), "--children"]
    warm = subprocess.run([*me, "0", "--parent", "server"], env=env, capture_output=True, text=True)
    print("cache filled:", warm.returncode, warm.stdout.strip()[-300:], warm.stderr.strip()[-500:])
    records = []
    for candidate in CANDIDATES:
        done = subprocess.run(
            [*me, str(args.children), "--parent", candidate],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            records.append({"candidate": candidate, "error": done.stderr[-2000:]})
            continue
        records.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for record in records:
        print(
            f"\n== {record['candidate']}: parent {record.get('parent_s', 0):.2f} s,"
            f" bad fork {record.get('bad_fork')}"
        )
        if "error" in record:
            print(record["error"])
            continue
        runs = [r for r in record["runs"] if "error" not in r]
        for r in record["runs"]:
            if "error" in r:
                print("child error:", r["error"])
        for name in runs[0] if runs else []:
            values = [r[name] for r in runs]
            print(
                f"  {name:22} median {statistics.median(values) * 1e3:8.1f} ms"
                f"  ({', '.join(f'{v * 1e3:.1f}' for v in values)})"
            )
        print(record.get("profile", ""))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
