"""How fast a cached reference output comes back onto the GPU: the harness's read
(envaudit.harness.reference, safetensors' load_file straight to the device) beside other ways of
reading the same file, for one large output (a 16384x6144 bfloat16 GEMM's, 201 MB) and one
small one, the file in the page cache as it is on a re-audit. Median of REPEATS reads each.

    python benchmarks/reference_read.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load, load_file, save_file

from envaudit.harness.reference import read_outputs

REPEATS = 7
SHAPES = {"201 MB": (16384, 6144), "2 MB": (128, 8192)}


def median_s(read: Callable[[], Any]) -> float:
    read()
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize()
        began = time.perf_counter()
        read()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def methods(path: Path) -> dict[str, Callable[[], Any]]:
    return {
        "load_file(device=cuda) (before)": lambda: load_file(str(path), device="cuda"),
        "load_file to the CPU, then .cuda()": lambda: {
            k: v.cuda() for k, v in load_file(str(path)).items()
        },
        "load(read_bytes()), then .cuda()": lambda: {
            k: v.cuda() for k, v in load(path.read_bytes()).items()
        },
        "readinto a pinned buffer, one copy": lambda: pinned_read(path),
        "harness (read_outputs)": lambda: read_outputs(path, torch.device("cuda")),
    }


def pinned_read(path: Path) -> dict[str, torch.Tensor]:
    """The file read into page-locked memory in one call and copied to the GPU in one transfer,
    the tensors then viewed out of the device copy (safetensors' header: 8-byte length, JSON)."""
    size = path.stat().st_size
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    with path.open("rb", buffering=0) as handle:
        handle.readinto(memoryview(host.numpy()))
    device = host.to("cuda", non_blocking=True)
    length = int.from_bytes(bytes(host[:8].tolist()), "little")
    header = json.loads(bytes(host[8 : 8 + length].tolist()))
    base = 8 + length
    dtypes = {"BF16": torch.bfloat16, "F32": torch.float32, "F16": torch.float16}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = device[base + begin : base + end]
        tensors[name] = raw.view(dtypes[entry["dtype"]]).view(entry["shape"])
    return tensors


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as folder:
        for size, shape in SHAPES.items():
            path = Path(folder) / f"{size}.safetensors"
            out = torch.randn(shape, device="cuda").to(torch.bfloat16)
            save_file({"out0": out}, str(path))
            assert torch.equal(read_outputs(path, torch.device("cuda"))[0], out)
            for name, read in methods(path).items():
                seconds = median_s(read)
                rows.append({"size": size, "method": name, "seconds": seconds})
                print(f"{size:7} {name:38} {seconds * 1e3:8.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
