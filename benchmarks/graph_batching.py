"""What bounds a graph figure from below: graphs of one call, and chained graphs.

A capture that records nothing for its first calls and one batched kernel over all their
inputs at its last call is right wherever the judge looks, and faster per call than calls made
one at a time (docs/harness.md, "Timing integrity", item 3). Two bounds are measured here,
alternating with the harness's graph mode as it is (N calls a graph, each its own row drawn
after the flush), for honest kernels from a 1 KiB scaled copy to a bf16 GEMM of m=2048 and for
two batching captures (a copy and a GEMM that compute every call's row in one kernel at the
last captured call):
- t(1): graphs of one call each, which cannot batch across calls; an honest figure t(N) sits
  below it by about one replay's fixed cost.
- the chained graph (the harness's CHAINED_GRAPH): the same N calls, each call's row keyed
  inside the replay by every bit of the call before's outputs, so that no row exists before
  the call before has returned; less the chain's own cost a call (the same graph with no
  kernel: each call returns one fixed tensor), it should read t(N) for an honest kernel.
Per form: the median of REPEATS medians (us per call), t(1) - t(N) in us, t(N)/t(1), and
(chained - chain) / t(N), which judge.BATCH_RATIO and judge.BATCH_MARGIN_MS bound.

    python benchmarks/graph_batching.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from typing import Any

import torch
from graph_rows import COPIES, Rows

from envaudit.harness import timing
from envaudit.harness.witness import (
    MANTISSA_BITS,
    ONE_BITS,
    FreshInput,
    chain_call_ms,
    mixed_key,
)

REPEATS = 5


class CappedRows(Rows):
    """Rows drawn after the flush (the harness's layout), at most `cap` calls a graph."""

    def __init__(self, copy: torch.Tensor, cap: int) -> None:
        super().__init__(copy, after_flush=True)
        self.cap = cap

    def graph_call_cap(self) -> int:
        return self.cap


class ChainedRows(Rows):
    """Rows chained inside the graph: before captured call j > 0, the device keys row j by
    every bit of call j-1's outputs (witness.mixed_key, FreshInput.keyed_into, the eager
    chain's kernels), so no call's input exists before the call before it has returned: a
    capture cannot batch. The nonce's mantissa bits of every row are drawn after the flush."""

    def __init__(self, copy: torch.Tensor) -> None:
        super().__init__(copy, after_flush=True)
        self.fresh = FreshInput("x", tuple(copy.shape), copy.dtype, None)
        self.bits: torch.Tensor | None = None
        self.previous: Any = None

    def capturing(self, calls: int) -> None:
        super().capturing(calls)
        self.bits = None
        self.bits = torch.empty((calls, *self.shape), dtype=torch.int32, device=self.device)
        self.flushed(0)

    def capture(self, graph: int, call: int) -> None:
        super().capture(graph, call)
        if call > 0 and self.rows is not None and self.bits is not None:
            outputs = self.previous if isinstance(self.previous, list) else [self.previous]
            keyed = self.bits[call].clone()  # the harness keys a copy: warm-ups key again
            self.fresh.keyed_into(self.rows[call], mixed_key(outputs), keyed)

    def captured(self, graph: int, call: int, result: Any) -> None:
        self.previous = result

    def flushed(self, step: int) -> None:
        if self.rows is not None and self.bits is not None:
            self.rows[0].normal_()
            self.bits.random_(ONE_BITS, ONE_BITS + (1 << MANTISSA_BITS))


Kernel = Callable[[torch.Tensor, int], Any]


def honest(kernel: Kernel, copies: list[torch.Tensor], cap: int) -> tuple[Any, timing.Window]:
    rows = CappedRows(copies[0], cap)

    def launch(i: int) -> Any:
        return kernel(copies[i] if rows.rows is None else rows.rows[rows.call], i)

    return launch, rows


def chained(
    kernel: Kernel, copies: list[torch.Tensor], draws_only: bool
) -> tuple[Any, timing.Window]:
    """The kernel on chained rows, or (draws_only) no kernel at all: each call returns the
    same output-shaped tensor, so the figure is the chain's own cost a call."""
    rows = ChainedRows(copies[0])
    dummy = kernel(copies[0], 0).clone() if draws_only else None

    def launch(i: int) -> Any:
        if dummy is not None:
            return dummy
        return kernel(copies[i] if rows.rows is None else rows.rows[rows.call], i)

    return launch, rows


def batching(
    batched: Callable[[torch.Tensor, torch.Tensor], Any],
    kernel: Kernel,
    copies: list[torch.Tensor],
    out_shape: tuple[int, ...],
    cap: int,
) -> tuple[Any, timing.Window]:
    """A capture that records no work for calls 0..n-2 and one batched kernel over all n rows
    at call n-1; each call returns its slice of the batched output. Uncaptured, it is honest."""
    rows = CappedRows(copies[0], cap)
    state: dict[str, Any] = {"out": None, "calls": 0}
    original = rows.capturing

    def capturing(calls: int) -> None:
        original(calls)
        state["calls"] = calls
        state["out"] = torch.empty(
            (calls, *out_shape), device=copies[0].device, dtype=copies[0].dtype
        )

    rows.capturing = capturing  # type: ignore[method-assign]

    def launch(i: int) -> Any:
        if rows.rows is None or not torch.cuda.is_current_stream_capturing():
            return kernel(copies[i] if rows.rows is None else rows.rows[rows.call], i)
        if rows.call == state["calls"] - 1:
            batched(rows.rows, state["out"])
        return state["out"][rows.call]

    return launch, rows


Make = Callable[[int], tuple[Any, timing.Window]]


def compare(name: str, make: Make, chain: dict[str, Make] | None = None) -> dict[str, Any]:
    """t(N), t(1) and, where `chain` gives them, the chained graph's figure and the chain's
    own (its draws with no kernel), alternating, REPEATS times."""
    device = torch.device("cuda")
    forms: dict[str, Make] = {
        "graph": lambda _: make(timing.MAX_GRAPH_CALLS),
        "one_call": lambda _: make(1),
        **(chain or {}),
    }
    medians: dict[str, list[float]] = {f: [] for f in forms}
    calls: dict[str, list[int]] = {f: [] for f in forms}
    for _ in range(REPEATS):
        for form, made in forms.items():
            launch, window = made(0)
            stats = timing.time_graph_cuda(launch, COPIES, device, window=window)
            medians[form].append(stats.median_ms * 1e3)
            calls[form].append(stats.calls_per_sample)
    row: dict[str, Any] = {f: round(statistics.median(v), 4) for f, v in medians.items()}
    row["calls"] = {f: sorted(set(v)) for f, v in calls.items()}
    row["gap_us"] = round(row["one_call"] - row["graph"], 4)
    row["graph_over_one_call"] = round(row["graph"] / row["one_call"], 4)
    if chain:
        row["chained_less_draws_over_graph"] = round(
            (row["chained"] - row["chain_draws"]) / row["graph"], 4
        )
    row["spread"] = {f: round(max(v) / min(v), 4) for f, v in medians.items()}
    print(
        f"{name:28} t(N) {row['graph']:9.3f} us (N {row['calls']['graph']})  t(1)"
        f" {row['one_call']:9.3f} us  gap {row['gap_us']:7.3f} us  ratio"
        f" {row['graph_over_one_call']:.4f}",
        flush=True,
    )
    if chain:
        print(
            f"{'':28} chained {row['chained']:9.3f} us  its draws {row['chain_draws']:9.3f} us"
            f"  (chained - draws) / t(N) {row['chained_less_draws_over_graph']:.4f}",
            flush=True,
        )
    print(f"{'':28} spread {row['spread']}", flush=True)
    return row


def judge_chain(row: dict[str, Any], kernel: Kernel, copies: list[torch.Tensor]) -> None:
    """Beside the chain's cost as the harness's graph timing reads it (`chain_draws`), the
    judge's own measurement of it (witness.chain_call_ms), which the rule takes off."""
    out = kernel(copies[0], 0)
    fresh = FreshInput("x", tuple(copies[0].shape), copies[0].dtype, None)
    calls = row["calls"]["graph"][0]
    measured = chain_call_ms(fresh, [(tuple(out.shape), out.dtype)], calls, copies[0].device)
    row["judge_chain_us"] = round(measured * 1e3, 4)
    row["bound_ratio"] = round((row["chained"] - row["judge_chain_us"]) / row["graph"], 4)
    print(
        f"{'':28} judge's chain {row['judge_chain_us']:9.3f} us"
        f"  (chained - judge's chain) / t(N) {row['bound_ratio']:.4f}",
        flush=True,
    )


def chain_forms(kernel: Kernel, copies: list[torch.Tensor]) -> dict[str, Make]:
    return {
        "chained": lambda _: chained(kernel, copies, False),
        "chain_draws": lambda _: chained(kernel, copies, True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    results: dict[str, Any] = {"gpu": torch.cuda.get_device_name(device)}
    for kib in (1, 64, 512, 4096):
        copies = [torch.randn(kib * 256, device=device) for _ in range(COPIES)]
        outs = [torch.empty_like(c) for c in copies]

        def scaled(x: torch.Tensor, i: int, outs: list[torch.Tensor] = outs) -> Any:
            return torch.mul(x, 1.5, out=outs[i])

        results[f"copy {kib} KiB"] = compare(
            f"scaled copy {kib} KiB",
            lambda cap, c=copies, k=scaled: honest(k, c, cap),
            chain_forms(scaled, copies),
        )
        judge_chain(results[f"copy {kib} KiB"], scaled, copies)
        if kib == 64:
            results[f"batching copy {kib} KiB"] = compare(
                f"batching copy {kib} KiB",
                lambda cap, c=copies, k=scaled: batching(
                    lambda rows, out: torch.mul(rows, 1.5, out=out), k, c, tuple(c[0].shape), cap
                ),
            )
    weight = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    for m in (64, 2048):
        acts = [torch.randn(m, 4096, device=device, dtype=torch.bfloat16) for _ in range(COPIES)]

        def gemm(x: torch.Tensor, i: int) -> Any:
            return x @ weight.T

        results[f"gemm m{m}"] = compare(
            f"bf16 GEMM m={m}", lambda cap, a=acts: honest(gemm, a, cap), chain_forms(gemm, acts)
        )
        judge_chain(results[f"gemm m{m}"], gemm, acts)
        if m == 64:
            results[f"batching gemm m{m}"] = compare(
                f"batching GEMM m={m}",
                lambda cap, a=acts, m=m: batching(
                    lambda rows, out: torch.matmul(rows, weight.T, out=out),
                    gemm,
                    a,
                    (m, 4096),
                    cap,
                ),
            )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
