"""What a chained step's harness work costs on a GPU: the key of the previous step's outputs
and the keyed draw of the next input (chain_key, FreshInput.draw_keyed_into), launched op by op
beside the same work replayed as one CUDA graph (GraphedChain, what the solution's process
does in eager judged timing), with the plain draw of an unchained step for scale; at the sizes
of the dev suite's fresh inputs (bf16; outputs of the input's size for the key).

Two figures per form, all forms in turns in one process: `alone`, wall time from a
synchronised start to a synchronised end (what the judge's calibration measures; median of
REPEATS), and `in a row`, the wall time of ROW steps queued back to back then synchronised,
per step: what the steps cost a timing loop whose host queues ahead of the device.

    python benchmarks/chained_draw.py [--device cuda] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from envaudit.harness.witness import FreshInput, GraphedChain, chain_key, keyed_on_host

REPEATS = 50
ROW = 200
SIZES = (4096, 1 << 16, 1 << 20, 1 << 24)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def alone_ms(run: Callable[[], object], device: torch.device) -> float:
    times = []
    for _ in range(REPEATS):
        _sync(device)
        began = time.perf_counter()
        run()
        _sync(device)
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def in_a_row_ms(run: Callable[[], object], device: torch.device) -> float:
    _sync(device)
    began = time.perf_counter()
    for _ in range(ROW):
        run()
    _sync(device)
    return (time.perf_counter() - began) * 1e3 / ROW


def measure(numel: int, device: torch.device) -> dict[str, float]:
    """Each form's figures (ms) at `numel` bf16 elements."""
    fresh = FreshInput("x", (numel,), torch.bfloat16, None)
    target = torch.empty(fresh.shape, dtype=fresh.dtype, device=device)
    outputs = [torch.randn(numel, device=device).to(torch.bfloat16)]

    def op_by_op() -> None:
        key = chain_key(outputs)
        assert key is not None
        fresh.draw_chained_into(target, 1, 1, 0, key)

    forms: dict[str, Callable[[], object]] = {
        "plain": lambda: fresh.draw_into(target, 1, 1, 0),
        "key": lambda: chain_key(outputs),
        "op_by_op": op_by_op,
    }
    if not keyed_on_host(device):
        chain = GraphedChain(fresh, [((numel,), torch.bfloat16)], [target])
        forms["graphed"] = lambda: chain.draw(outputs, 1, 1, 0)
    figures: dict[str, list[float]] = {}
    for _ in range(3):
        for name, run in forms.items():
            run()
            figures.setdefault(f"{name}_alone", []).append(alone_ms(run, device))
            figures.setdefault(f"{name}_in_a_row", []).append(in_a_row_ms(run, device))
    return {name: statistics.median(values) for name, values in figures.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for numel in SIZES:
        row = {"numel": numel, **measure(numel, device)}
        rows.append(row)
        cells = "  ".join(
            f"{name} {row[f'{name}_alone'] * 1e3:7.1f}/{row[f'{name}_in_a_row'] * 1e3:7.1f}"
            for name in ("plain", "key", "op_by_op", "graphed")
            if f"{name}_alone" in row
        )
        print(f"{numel:>10} elements (us, alone/in a row): {cells}")
    if args.json:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        args.json.write_text(json.dumps({"device": name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
