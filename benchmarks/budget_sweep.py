"""What a shorter measuring budget buys and costs on a power-limited kernel, every budget side by
side in one run.

Issue 16 asks for one measurement at most 1.2x `triton.testing.do_bench`'s wall time with the
harness still within 1% of CUPTI. On the 8192^3 BF16 GEMM the H200 sits at its power limit and
its clock wanders (clock_window.py), so the answer depends on the budget: this benchmark gives
the curve. After the kernel is heated until its clock settles (timing_fidelity.heat_up), each
round times it once with every method: the harness's eager and graph timers at each budget of
`--budgets` (as `--measure-ms B` runs them: budget and the wandering clock's minimum both B),
and do_bench with its defaults. The methods take turns in an order rotated every round, so the
clock's slow drift falls on all of them alike. Every measurement is followed by the same method
once more under CUPTI (torch.profiler), which gives the paired ratio (the figure over the CUPTI
durations of the kernels measured right after it) and the same-launch ratio (that second
figure over the durations of its own launches: the timer's own error).

Per method, over the rounds: the median figure, its spread (max/min) and coefficient of
variation, the two ratios to CUPTI (medians), how far its median is from the median of the
longest budget of the same mode, the median wall time of one measurement and its ratio to
do_bench's.

    python benchmarks/budget_sweep.py [--kernel gemm_bf16_8192] [--budgets 50,100,150,200,300]
        [--rounds 9] [--json OUT.json]
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
from timing_fidelity import (
    calibration_kernels,
    cell,
    clock,
    cupti_kernel_us,
    heat_up,
    kernel_names,
)

from envaudit.harness.evaluate import EvalOptions
from envaudit.harness.timing import TimingStats, time_eager_cuda, time_graph_cuda

DO_BENCH = "triton do_bench"


def methods(
    launch: Callable[[int], Any], copies: int, device: torch.device, budgets: list[float]
) -> dict[str, Callable[[], TimingStats | float]]:
    """Method name -> one measurement: the harness's TimingStats, or do_bench's figure in ms."""
    import triton.testing  # type: ignore[import-not-found,import-untyped,unused-ignore]

    out: dict[str, Callable[[], TimingStats | float]] = {}
    for budget in budgets:
        kw = EvalOptions(measure_ms=budget).budgets()
        out[f"eager {budget:g} ms"] = lambda kw=kw: time_eager_cuda(
            launch, copies, device, clock(), **kw
        )
        out[f"graph {budget:g} ms"] = lambda kw=kw: time_graph_cuda(
            launch, copies, device, clock(), **kw
        )
    out[DO_BENCH] = lambda: float(triton.testing.do_bench(lambda: launch(0)))
    return out


def figure_us(result: TimingStats | float) -> float:
    return (result.median_ms if isinstance(result, TimingStats) else result) * 1e3


def one_round(
    order: list[str], timers: dict[str, Callable[[], TimingStats | float]], names: set[str]
) -> list[dict[str, Any]]:
    """Each method once, in `order`, each followed by its CUPTI pass."""
    out = []
    for method in order:
        before = clock().read()
        start = time.perf_counter()
        result = timers[method]()
        wall = time.perf_counter() - start
        after = clock().read()
        profiled, cupti = cupti_kernel_us(lambda m=method: figure_us(timers[m]()), names)
        stats = result if isinstance(result, TimingStats) else None
        out.append(
            {
                "method": method,
                "figure_us": figure_us(result),
                "wall_s": wall,
                "cupti_us": cupti,
                "profiled_us": profiled,
                "sm_clock_mhz": [before, after],
                "stop": stats.stop if stats else None,
                "power_limited": stats.power_limited if stats else None,
                "iterations": stats.iterations if stats else None,
            }
        )
    return out


def summarize(measurements: list[dict[str, Any]], order: list[str]) -> list[dict[str, Any]]:
    """Per method: figure, spread, CV, ratios to CUPTI, offset from the longest budget of its
    mode, wall and wall over do_bench's."""
    by_method: dict[str, list[dict[str, Any]]] = {m: [] for m in order}
    for m in measurements:
        by_method[m["method"]].append(m)
    walls = {m: statistics.median(r["wall_s"] for r in rs) for m, rs in by_method.items()}
    medians = {m: statistics.median(r["figure_us"] for r in rs) for m, rs in by_method.items()}
    longest = {}
    for m in order:
        mode = m.split()[0]
        if m != DO_BENCH:
            longest[mode] = m  # methods are listed shortest budget first
    rows = []
    for m, rs in by_method.items():
        figures = [r["figure_us"] for r in rs]
        paired = [r["figure_us"] / r["cupti_us"] for r in rs if r["cupti_us"]]
        same = [r["profiled_us"] / r["cupti_us"] for r in rs if r["cupti_us"]]
        reference = longest.get(m.split()[0])
        rows.append(
            {
                "method": m,
                "n": len(rs),
                "median_us": medians[m],
                "spread": max(figures) / min(figures),
                "cv": statistics.pstdev(figures) / statistics.fmean(figures),
                "paired_ratio": statistics.median(paired) if paired else None,
                "same_launch_ratio": statistics.median(same) if same else None,
                "over_longest": medians[m] / medians[reference] if reference else None,
                "wall_median_s": walls[m],
                "wall_over_do_bench": walls[m] / walls[DO_BENCH],
                "stops": sorted({str(r["stop"]) for r in rs}),
                "limited": sum(bool(r["power_limited"]) for r in rs),
            }
        )
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'method':18} {'n':>3} {'us':>10} {'spread':>7} {'cv %':>6} {'paired':>7} {'same':>7}"
        f" {'/longest':>8} {'wall s':>7} {'/do_bench':>9}  stops, limited"
    )
    for r in rows:
        paired = cell(r["paired_ratio"], 7, 4)
        same = cell(r["same_launch_ratio"], 7, 4)
        longest = cell(r["over_longest"], 8, 4)
        print(
            f"{r['method']:18} {r['n']:3d} {r['median_us']:10.2f} {r['spread']:7.4f}"
            f" {100 * r['cv']:6.2f} {paired} {same} {longest} {r['wall_median_s']:7.3f}"
            f" {r['wall_over_do_bench']:9.2f}  {','.join(r['stops'])}, {r['limited']}/{r['n']}"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernel", default="gemm_bf16_8192")
    parser.add_argument("--budgets", default="50,100,150,200,300", help="ms, comma-separated")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", help="also write every measurement and the summary here")
    args = parser.parse_args()
    budgets = sorted(float(b) for b in args.budgets.split(","))
    device = torch.device("cuda")
    launch, copies = calibration_kernels(device)[args.kernel]
    heated = heat_up(launch, copies)
    print(
        f"{args.kernel}: heat-up {heated['seconds']:.2f} s, settled {heated['settled']},"
        f" clock {heated['readings'][:1]} -> {heated['readings'][-1:]} MHz"
    )
    names = kernel_names(launch)
    timers = methods(launch, copies, device, budgets)
    order = list(timers)
    measurements = []
    for r in range(args.rounds):
        turn = order[r % len(order) :] + order[: r % len(order)]
        measurements += one_round(turn, timers, names)
    rows = summarize(measurements, order)
    print_rows(rows)
    if args.json:
        record = {
            "device": torch.cuda.get_device_name(device),
            "torch": torch.__version__,
            "kernel": args.kernel,
            "heat_up": heated,
            "rows": rows,
            "measurements": measurements,
        }
        with open(args.json, "w") as handle:
            json.dump(record, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
