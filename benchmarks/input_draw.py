"""How fast the harness draws random inputs on the CPU, beside torch's own generator in the same
run: a 6144x4096 bfloat16 normal tensor (the smoke GEMM's weight), a 16M-element float32 normal
one and a 16M-element int32 one, each the median of REPEATS draws.

    python benchmarks/input_draw.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from envaudit.harness.inputs import random_tensor

REPEATS = 5
CASES: dict[str, tuple[tuple[int, ...], torch.dtype]] = {
    "bf16 normal 6144x4096": ((6144, 4096), torch.bfloat16),
    "fp32 normal 16M": ((1 << 24,), torch.float32),
    "int32 randint 16M": ((1 << 24,), torch.int32),
}


def median_s(draw: Callable[[], Any]) -> float:
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        draw()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peer(shape: tuple[int, ...], dtype: torch.dtype) -> Callable[[], Any]:
    if dtype.is_floating_point:
        return lambda: torch.randn(shape, dtype=dtype)
    return lambda: torch.randint(-1024, 1024, shape, dtype=dtype)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for name, (shape, dtype) in CASES.items():
        harness = median_s(lambda s=shape, d=dtype: random_tensor(s, d, None, 7))
        torch_s = median_s(peer(shape, dtype))
        rows.append({"case": name, "harness_s": harness, "torch_s": torch_s})
        print(f"{name:24} harness {harness:.3f} s  torch {torch_s:.3f} s  {harness / torch_s:.2f}x")
    print(f"threads: {torch.get_num_threads()}, torch {torch.__version__}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"threads": torch.get_num_threads(), "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
