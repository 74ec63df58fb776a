"""What giving each captured call a fresh input of its own does to the graph figure.

Judged graph timing gives every captured call its own row of the fresh input (so that no call
of a replay can be answered by copying another's: witness.graph_call_cap), where calls used to
rotate over at most 8 input copies. A replay's calls then read up to 256 distinct rows where 8
copies of a small input stayed in L2, so a memory-bound kernel's graph figure may move. This
times the harness's graph mode both ways, alternating, for kernels whose input is the "fresh"
one: a scaled copy of 64 KiB to 4 MiB (bandwidth-bound, a few microseconds) and a bf16 GEMM of
m=64 against a 4096x4096 weight (the weight shared, the 512 KiB activations fresh). Per form:
the median of REPEATS graph medians (us per call), and each rows form over copies. The rows
are drawn anew before every replay, before the L2 flush or after it (the harness: the flushed
hook), since where they lie when the replay starts is what moves the figure. Beside each
figure, the median CUPTI duration of the same captured kernels replayed the same way: whether
a move is the kernels' own time or the harness's.

    python benchmarks/graph_rows.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from envaudit.harness import timing

COPIES = 8
REPEATS = 5


class Rows(timing.Window):
    """The judged layout's rows, without a judge: call j of a graph reads row j, the rows drawn
    anew before every replay, before the L2 flush or after it (`after_flush`, the harness's)."""

    def __init__(self, copy: torch.Tensor, after_flush: bool) -> None:
        self.shape, self.dtype, self.device = tuple(copy.shape), copy.dtype, copy.device
        self.after_flush = after_flush
        self.rows: torch.Tensor | None = None
        self.call = 0

    def capturing(self, calls: int) -> None:
        self.rows = None
        self.rows = torch.randn((calls, *self.shape), device=self.device).to(self.dtype)

    def capture(self, graph: int, call: int) -> None:
        self.call = call

    def prime(self, step: int) -> None:
        if self.rows is not None and not self.after_flush:
            self.rows.normal_()

    def flushed(self, step: int) -> None:
        if self.rows is not None and self.after_flush:
            self.rows.normal_()


def forms(
    kernel: Callable[[torch.Tensor, int], Any], copies: list[torch.Tensor]
) -> dict[str, tuple[Callable[[int], Any], timing.Window]]:
    """The launch over rotating copies, and over each captured call's own row (drawn before
    or after the flush)."""
    made: dict[str, tuple[Callable[[int], Any], timing.Window]] = {
        "copies": (lambda i: kernel(copies[i], i), timing.NO_WINDOW)
    }
    for form, after_flush in (("rows_before_flush", False), ("rows", True)):
        rows = Rows(copies[0], after_flush)

        def on_row(i: int, rows: Rows = rows) -> Any:
            source = copies[i] if rows.rows is None else rows.rows[rows.call]
            return kernel(source, i)

        made[form] = (on_row, rows)
    return made


def cupti_us(launch: Callable[[int], Any], window: timing.Window, calls: int) -> float:
    """The median CUPTI duration of the kernels of `calls` captured calls, as the harness
    replays them (the window's draws and the flush around each replay), over five replays:
    what the kernels themselves took, beside what the harness's figure says they took."""
    device = torch.device("cuda")
    flush = timing.flush_buffer(device)
    graph = torch.cuda.CUDAGraph()
    window.capturing(calls)
    with torch.cuda.graph(graph):
        for j in range(calls):
            window.capture(0, j)
            launch(j % COPIES)

    def around(step: int) -> None:
        window.prime(step)
        flush.zero_()
        window.flushed(step)

    around(0)
    graph.replay()
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as harness_only:
        around(1)
        torch.cuda.synchronize(device)
    skip = {e.name for e in harness_only.events() if e.device_type.name == "CUDA"}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for step in range(2, 7):
            around(step)
            graph.replay()
        torch.cuda.synchronize(device)
    durations = [
        e.device_time for e in prof.events() if e.device_type.name == "CUDA" and e.name not in skip
    ]
    return float(statistics.median(durations))


def compare(
    name: str, kernel: Callable[[torch.Tensor, int], Any], copies: list[torch.Tensor]
) -> dict[str, Any]:
    device = copies[0].device
    medians: dict[str, list[float]] = {"copies": [], "rows_before_flush": [], "rows": []}
    for _ in range(REPEATS):
        for form, (launch, window) in forms(kernel, copies).items():
            stats = timing.time_graph_cuda(launch, COPIES, device, window=window)
            medians[form].append(stats.median_ms * 1e3)
    row = {form: round(statistics.median(values), 4) for form, values in medians.items()}
    row["rows_over_copies"] = round(row["rows"] / row["copies"], 4)
    row["before_flush_over_copies"] = round(row["rows_before_flush"] / row["copies"], 4)
    row["spread"] = {f: round(max(v) / min(v), 4) for f, v in medians.items()}
    calls = timing.graph_calls(row["copies"] / 1e3)
    row["cupti_us"] = {
        form: round(cupti_us(launch, window, calls), 4)
        for form, (launch, window) in forms(kernel, copies).items()
    }
    row["over_cupti"] = {f: round(row[f] / row["cupti_us"][f], 4) for f in medians}
    print(
        f"{name:24} copies {row['copies']:7.3f} us  rows drawn before the flush"
        f" {row['rows_before_flush']:7.3f} ({row['before_flush_over_copies']:.4f}x)"
        f"  after it {row['rows']:7.3f} ({row['rows_over_copies']:.4f}x)",
        flush=True,
    )
    print(f"{'':24} CUPTI kernel us {row['cupti_us']}, figure / CUPTI {row['over_cupti']}")
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
