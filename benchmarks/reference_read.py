"""How fast a cached reference output comes back onto the GPU, read as a worker reads it: each
entry once, in a process that has read others before (envaudit.harness.reference).

Two entries of each size (a 4096x6144, a 16384x6144 and a 16384x8192 bfloat16 output: 50, 201
and 268 MB), the files in the page cache as they are on a re-audit, read one after the other in
a fresh process per method (and, with --forked, in a child forked from a parent that imported
torch without touching CUDA, as the fork server's workers are). Between two reads the GPU's
memory is churned (3 GiB filled and freed, the caching allocator emptied), as a workload's
timing does. The first read of each size is where the methods differ: read straight to the
device, safetensors' load_file paid for each new size; mapped on the CPU and copied, it did not.

    python benchmarks/reference_read.py [--rounds N] [--forked] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from envaudit.harness.reference import read_outputs

SHAPES = {"50 MB": (4096, 6144), "201 MB": (16384, 6144), "268 MB": (16384, 8192)}
CHURN_BYTES = 1 << 30
CHURN_BLOCKS = 3


def methods() -> dict[str, Callable[[Path], torch.Tensor]]:
    pinned = PinnedReader()
    return {
        "load_file(device=cuda) (before)": lambda p: load_file(str(p), device="cuda")["out0"],
        "harness: mapped on the CPU, copied": lambda p: read_outputs(p, torch.device("cuda"))[0],
        "one pinned buffer, kept": pinned.read,
    }


class PinnedReader:
    """The file read into one page-locked buffer the process keeps (grown when too small) and
    copied to the GPU in one transfer, the output viewed out of the device copy (safetensors'
    layout: an 8-byte header length, the JSON header, the data)."""

    def __init__(self) -> None:
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def read(self, path: Path) -> torch.Tensor:
        size = path.stat().st_size
        if self.buffer.numel() < size:
            self.buffer = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        host = self.buffer[:size]
        with path.open("rb", buffering=0) as handle:
            handle.readinto(memoryview(host.numpy()))
        device = host.to("cuda", non_blocking=True)
        length = int.from_bytes(bytes(host[:8].tolist()), "little")
        entry = json.loads(bytes(host[8 : 8 + length].tolist()))["out0"]
        begin, end = entry["data_offsets"]
        raw = device[8 + length + begin : 8 + length + end]
        return raw.view(torch.bfloat16).view(entry["shape"])


def write_entries(folder: Path) -> list[Path]:
    paths = []
    for size, shape in SHAPES.items():
        for copy in range(2):
            path = folder / f"{size.replace(' ', '')}-{copy}.safetensors"
            save_file({"out0": torch.randn(shape, device="cuda").to(torch.bfloat16)}, str(path))
            paths.append(path)
    return paths


def read_all(method: str, paths: list[Path]) -> list[float]:
    """Seconds per read, in order, in this process (its CUDA context made first)."""
    torch.empty(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    read = methods()[method]
    seconds = []
    for path in paths:
        began = time.perf_counter()
        out = read(path)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - began)
        if not torch.equal(out, load_file(str(path), device="cuda")["out0"]):
            raise SystemExit(f"{method} read {path.name} wrong")
        del out
        churn = [
            torch.full((CHURN_BYTES,), 1, dtype=torch.uint8, device="cuda")
            for _ in range(CHURN_BLOCKS)
        ]
        torch.cuda.synchronize()
        del churn
        torch.cuda.empty_cache()
    return seconds


def in_fresh_process(method: str, paths: list[Path]) -> list[float]:
    argv = [sys.executable, __file__, "--child", method, *map(str, paths)]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [float(x) for x in done.stdout.split()]


def in_forked_child(method: str, paths: list[Path]) -> list[float]:
    """Read in a child forked from this process, which has not touched CUDA."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        try:
            text = " ".join(map(str, read_all(method, paths)))
            os.write(writer, text.encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as stream:
        text = stream.read()
    os.waitpid(pid, 0)
    return [float(x) for x in text.split()]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--forked", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        method, *paths = args.child
        if method == "write":
            write_entries(Path(paths[0]))
            return 0
        print(" ".join(map(str, read_all(method, [Path(p) for p in paths]))))
        return 0
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as folder:
        # the entries are written by another process, as the cold audit's workers write them
        subprocess.run([sys.executable, __file__, "--child", "write", folder], check=True)
        paths = sorted(Path(folder).glob("*.safetensors"), key=_in_order)
        names = [p.name.removesuffix(".safetensors") for p in paths]
        print(f"{'':7} {'method':36} " + " ".join(f"{n:>9}" for n in names) + "  (ms)")
        ways = [("fresh", in_fresh_process)] + ([("forked", in_forked_child)] * args.forked)
        for round_ in range(args.rounds):
            for method in methods():
                for way, run in ways:
                    seconds = run(method, paths)
                    rows.append(
                        {
                            "round": round_,
                            "method": method,
                            "process": way,
                            "reads": dict(zip(names, seconds, strict=True)),
                        }
                    )
                    shown = " ".join(f"{1e3 * s:9.1f}" for s in seconds)
                    print(f"{way:7} {method:36} {shown}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


def _in_order(path: Path) -> tuple[int, int]:
    size, copy = path.name.removesuffix(".safetensors").split("-")
    return int(size.removesuffix("MB")), int(copy)


if __name__ == "__main__":
    sys.exit(main())
