"""What a chained step's fresh draw costs on a GPU: the keyed draw the harness makes now
(FreshInput.draw_keyed_into: the key XORed into the nonce's random mantissas, mapped to the
rule) beside the roll it replaced (the nonce's draw with its rows shifted by the key), and the
key itself (chain_key's two mixed rounds) beside the plain sum of words it replaced, at the
sizes of the dev suite's fresh inputs (bf16; the key over outputs of that size). Each figure
is what the judge's calibration measures, wall time from a synchronised start to a
synchronised end (it holds the kernels' launches), median of REPEATS, all forms in turns in
one process.

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

from envaudit.harness.witness import FreshInput, chain_key

REPEATS = 50
SIZES = (4096, 1 << 16, 1 << 20, 1 << 24)


def rolled_into(fresh: FreshInput, target: torch.Tensor, key: torch.Tensor) -> None:
    """The chain's first GPU form: the nonce's draw, rows (up to 4096) shifted by the key."""
    drawn = fresh.draw(1, 1, 0, target.device)
    n = drawn.numel()
    rows = next(r for r in range(min(n, 4096), 0, -1) if n % r == 0)
    index = torch.remainder(torch.arange(rows, device=target.device) + key, rows)
    torch.index_select(drawn.reshape(rows, -1), 0, index, out=target.view(rows, -1))


def wall_ms(run: Callable[[], object], device: torch.device) -> float:
    times = []
    for _ in range(REPEATS):
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        began = time.perf_counter()
        run()
        torch.cuda.synchronize(device) if device.type == "cuda" else None
        times.append((time.perf_counter() - began) * 1e3)
    return statistics.median(times)


def measure(numel: int, device: torch.device) -> dict[str, float]:
    """Each form's median wall time (ms) at `numel` bf16 elements, the forms in turns."""
    fresh = FreshInput("x", (numel,), torch.bfloat16, None)
    target = torch.empty(fresh.shape, dtype=fresh.dtype, device=device)
    key = chain_key([torch.ones(1024, device=device)])
    assert key is not None
    bits = fresh.draw_keyed_into(target, 1, 1, 0, key)
    outputs = [target]  # a step's outputs of the input's size, for the key
    forms: dict[str, Callable[[], object]] = {
        "plain": lambda: fresh.draw_into(target, 1, 1, 0),
        "rolled": lambda: rolled_into(fresh, target, key),
        "keyed": lambda: fresh.draw_keyed_into(target, 1, 1, 0, key, bits),
        "summed_key": lambda: target.view(torch.int64).sum(),
        "chain_key": lambda: chain_key(outputs),
    }
    figures: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(3):
        for name, run in forms.items():
            run()
            figures[name].append(wall_ms(run, device))
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
        print(
            f"{numel:>10} elements: plain {row['plain'] * 1e3:8.1f} us  rolled "
            f"{row['rolled'] * 1e3:8.1f} us  keyed {row['keyed'] * 1e3:8.1f} us  "
            f"keyed/rolled {row['keyed'] / row['rolled']:.2f}; key: summed "
            f"{row['summed_key'] * 1e3:8.1f} us  chain_key {row['chain_key'] * 1e3:8.1f} us"
        )
    if args.json:
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        args.json.write_text(json.dumps({"device": name, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
