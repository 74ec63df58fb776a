"""How fast the harness draws random inputs, beside torch's own generator in the same run: a
6144x4096 bfloat16 normal tensor (the smoke GEMM's weight), a 16M-element float32 normal one and
a 16M-element int32 one, each the median of REPEATS draws. With --device cuda, also a 1.44 GB
bfloat16 normal tensor (the size of a sparse GQA decode workload's KV cache), every case drawn
both by the fused kernel and step by step (the torch operations it replaces), the 1.44 GB draw
again at other step sizes (`--chunks`, elements per step; the harness's is DRAW_CHUNK), and the
first draw of a fresh process with torch's kernel cache empty (the kernel's compile) and with it
filled.

    python benchmarks/input_draw.py [--device cpu|cuda] [--chunks 20,22,24,26] [--json OUT.json]
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
from collections.abc import Callable
from typing import Any

import torch

from envaudit.harness import inputs
from envaudit.harness.inputs import random_tensor

REPEATS = 5
CASES: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "bf16 normal 6144x4096": ((6144, 4096), torch.bfloat16),
    "fp32 normal 16M": ((1 << 24,), torch.float32),
    "int32 randint 16M": ((1 << 24,), torch.int32),
}
GPU_CASES: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "bf16 normal 1.44 GB": ((11000, 64, 8, 128), torch.bfloat16),
}


def median_s(draw: Callable[[], Any], device: str) -> float:
    """Median wall time of REPEATS draws after one unmeasured draw (a GPU's first launches load
    their kernels), each until the device is done."""
    draw()
    times = []
    for _ in range(REPEATS):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        draw()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peer(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> Callable[[], Any]:
    if dtype.is_floating_point:
        return lambda: torch.randn(shape, dtype=dtype, device=device)
    return lambda: torch.randint(-1024, 1024, shape, dtype=dtype, device=device)


FIRST_DRAW = """
import time, torch
torch.cuda.init(); torch.empty(1, device="cuda").add_(1); torch.cuda.synchronize()
from envaudit.harness import inputs
began = time.perf_counter()
inputs.random_tensor((1024,), torch.bfloat16, None, 3, "cuda"); torch.cuda.synchronize()
print(time.perf_counter() - began, inputs.FUSED_DRAW_ERROR)
"""


def first_draws() -> list[dict[str, Any]]:
    """A fresh process's first draw (the kernel's compile, or its load from torch's kernel
    cache), with the cache empty and then filled by the first run."""
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        environ = {**os.environ, "PYTORCH_KERNEL_CACHE_PATH": cache}
        for state in ("empty", "filled"):
            done = subprocess.run(
                [sys.executable, "-c", FIRST_DRAW], env=environ, capture_output=True, text=True
            )
            seconds, _, error = done.stdout.strip().partition(" ")
            rows.append({"kernel_cache": state, "seconds": float(seconds), "error": error})
            how = "fused kernel" if error == "None" else f"step by step ({error})"
            print(f"first draw of a process, kernel cache {state}: {float(seconds):.3f} s, {how}")
    return rows


def step_by_step(draw: Callable[[], Any]) -> Callable[[], Any]:
    """`draw` with the fused kernel off, as the harness draws where it cannot compile it."""

    def drawn() -> Any:
        inputs.FUSED_DRAW_ERROR = "off for the benchmark"
        try:
            return draw()
        finally:
            inputs.FUSED_DRAW_ERROR = None

    return drawn


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--chunks", default="20,22,24,26", help="log2 of elements per step")
    parser.add_argument("--json")
    args = parser.parse_args()
    device = args.device
    cases = {**CASES, **(GPU_CASES if device == "cuda" else {})}
    rows: list[dict[str, Any]] = []
    for name, (shape, dtype) in cases.items():
        draw = lambda s=shape, d=dtype: random_tensor(s, d, None, 7, device)  # noqa: E731
        harness = median_s(draw, device)
        torch_s = median_s(peer(shape, dtype, device), device)
        row = {"case": name, "harness_s": harness, "torch_s": torch_s}
        text = f"{name:24} harness {harness:.4f} s  torch {torch_s:.4f} s  {harness / torch_s:.2f}x"
        if device == "cuda":
            row["step_by_step_s"] = median_s(step_by_step(draw), device)
            text += f"  step by step {row['step_by_step_s']:.4f} s"
        rows.append(row)
        print(text)
    steps: list[dict[str, Any]] = []
    if device == "cuda":
        harness_chunk = inputs.DRAW_CHUNK
        ((shape, dtype),) = GPU_CASES.values()
        for log2 in (int(text) for text in args.chunks.split(",")):
            inputs.DRAW_CHUNK = 1 << log2
            spent = median_s(lambda: random_tensor(shape, dtype, None, 7, device), device)
            steps.append({"chunk_log2": log2, "seconds": spent})
            print(f"1.44 GB draw in steps of 2**{log2} elements: {spent:.3f} s")
        inputs.DRAW_CHUNK = harness_chunk
    first = first_draws() if device == "cuda" else []
    print(f"threads: {torch.get_num_threads()}, torch {torch.__version__}")
    if args.json:
        record = {"device": device, "threads": torch.get_num_threads(), "rows": rows}
        with open(args.json, "w") as out:
            json.dump({**record, "steps": steps, "first_draws": first}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
