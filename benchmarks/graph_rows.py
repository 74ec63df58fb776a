"""What giving each captured call a fresh input of its own does to the graph figure.

Judged graph timing gives every captured call its own row of the fresh input (so that no call
of a replay can be answered by copying another's: witness.graph_call_cap), where calls used to
rotate over at most 8 input copies. A replay's calls then read up to 256 distinct rows where 8
copies of a small input stayed in L2, so a memory-bound kernel's graph figure may move. This
times the harness's graph mode both ways, alternating, for kernels whose input is the "fresh"
one: a scaled copy of 64 KiB to 4 MiB (bandwidth-bound, a few microseconds) and a bf16 GEMM of
m=64 against a 4096x4096 weight (the weight shared, the 512 KiB activations fresh). Per form:
the median of REPEATS graph medians (us per call), and rows / copies.

    python benchmarks/graph_rows.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch

from envaudit.harness import timing

COPIES = 8
REPEATS = 5


class Rows(timing.Window):
    """The judged layout's rows, without a judge: call j of a graph reads row j."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> None:
        self.shape, self.dtype, self.device = shape, dtype, device
        self.rows: torch.Tensor | None = None
        self.call = 0

    def capturing(self, calls: int) -> None:
        self.rows = None
        self.rows = torch.randn((calls, *self.shape), device=self.device).to(self.dtype)

    def capture(self, graph: int, call: int) -> None:
        self.call = call


def forms(
    kernel: Callable[[torch.Tensor, int], Any], copies: list[torch.Tensor]
) -> dict[str, tuple[Callable[[int], Any], timing.Window]]:
    """The launch over rotating copies, and over each captured call's own row."""
    rows = Rows(tuple(copies[0].shape), copies[0].dtype, copies[0].device)

    def on_row(i: int) -> Any:
        source = copies[i] if rows.rows is None else rows.rows[rows.call]
        return kernel(source, i)

    return {"copies": (lambda i: kernel(copies[i], i), timing.NO_WINDOW), "rows": (on_row, rows)}


def compare(
    name: str, kernel: Callable[[torch.Tensor, int], Any], copies: list[torch.Tensor]
) -> dict[str, Any]:
    device = copies[0].device
    medians: dict[str, list[float]] = {"copies": [], "rows": []}
    for _ in range(REPEATS):
        for form, (launch, window) in forms(kernel, copies).items():
            stats = timing.time_graph_cuda(launch, COPIES, device, window=window)
            medians[form].append(stats.median_ms * 1e3)
    row = {form: round(statistics.median(values), 4) for form, values in medians.items()}
    row["rows_over_copies"] = round(row["rows"] / row["copies"], 4)
    row["spread"] = {f: round(max(v) / min(v), 4) for f, v in medians.items()}
    print(
        f"{name:28} copies {row['copies']:8.3f} us  rows {row['rows']:8.3f} us  "
        f"rows/copies {row['rows_over_copies']:.4f}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(device)}
    for kib in (64, 512, 4096):
        copies = [torch.randn(kib * 256, device=device) for _ in range(COPIES)]
        outs = [torch.empty_like(c) for c in copies]
        results[f"copy {kib} KiB"] = compare(
            f"scaled copy {kib} KiB", lambda x, i, outs=outs: torch.mul(x, 1.5, out=outs[i]), copies
        )
    weight = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    acts = [torch.randn(64, 4096, device=device, dtype=torch.bfloat16) for _ in range(COPIES)]
    results["gemm m64 k4096 n4096"] = compare("bf16 GEMM m=64", lambda x, i: x @ weight.T, acts)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
