"""How long a measurement must last to average a power-limited clock: the 8192^3 BF16 GEMM,
heated until its clock settles (timing_fidelity.heat_up), then run back to back for RUN_S
seconds with device events around every call and the SM clock and its limit reasons read from
NVML every READ_EVERY calls. The calls are then cut into consecutive windows of W ms of kernel
time, and for each W the spread (max/min) of the windows' medians is what five measurements of
W ms each could disagree by. Since a max/min grows with the number of windows it is taken over,
each length also gets the coefficient of variation of its medians and the spread of EVEN_WINDOWS
windows spaced evenly over the run. The harness's rule (harness/timing.py) makes a measurement
during which NVML reports a power limit last WANDER_MIN_MEASURE_MS (the whole budget); this says
what a shorter one would give up.

    python benchmarks/clock_window.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

import torch
from timing_fidelity import calibration_kernels, clock, heat_up

RUN_S = 10.0
EVEN_WINDOWS = 9
READ_EVERY = 5
WINDOWS_MS = (20.0, 40.0, 80.0, 100.0, 150.0, 300.0, 600.0)


def run_back_to_back(launch: Any) -> tuple[list[float], list[tuple[int, int | None, bool]]]:
    """Per-call ms, and (call index, SM clock MHz, limited) every READ_EVERY calls."""
    reader = clock()
    times: list[float] = []
    reads: list[tuple[int, int | None, bool]] = []
    spent = 0.0
    while spent < RUN_S * 1e3:
        events = [torch.cuda.Event(enable_timing=True) for _ in range(2 * READ_EVERY)]
        for i in range(READ_EVERY):
            events[2 * i].record()
            launch(0)
            events[2 * i + 1].record()
        torch.cuda.synchronize()
        before = reader.limited_reads
        reads.append((len(times), reader.read(), reader.limited_reads > before))
        batch = [events[2 * i].elapsed_time(events[2 * i + 1]) for i in range(READ_EVERY)]
        times += batch
        spent += sum(batch)
    return times, reads


def window_spreads(times: list[float]) -> dict[str, dict[str, float]]:
    """For each window length: how many windows, and the spread of their medians."""
    out = {}
    for window in WINDOWS_MS:
        medians, current, spent = [], [], 0.0
        for t in times:
            current.append(t)
            spent += t
            if spent >= window:
                medians.append(statistics.median(current))
                current, spent = [], 0.0
        if len(medians) >= 2:
            out[f"{window:g}"] = {
                "windows": len(medians),
                "spread": max(medians) / min(medians),
                "cv": statistics.stdev(medians) / statistics.fmean(medians),
                f"spread_of_{EVEN_WINDOWS}": spread_of_even(medians),
            }
    return out


def spread_of_even(medians: list[float], count: int = EVEN_WINDOWS) -> float:
    """max/min over `count` windows spaced evenly across the run: the same number of windows
    for every length, so the spreads compare (a max/min over more windows is larger for the
    same scatter: 283 windows of 20 ms against 9 of 600 ms)."""
    if len(medians) < count:
        return max(medians) / min(medians)
    picked = [medians[round(j * (len(medians) - 1) / (count - 1))] for j in range(count)]
    return max(picked) / min(picked)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    args = parser.parse_args()
    launch, copies = calibration_kernels(torch.device("cuda"))["gemm_bf16_8192"]
    heat = heat_up(launch, copies)
    times, reads = run_back_to_back(launch)
    clocks = [mhz for _, mhz, _ in reads if mhz is not None]
    record = {
        "device": torch.cuda.get_device_name(),
        "heat_up_s": heat["seconds"],
        "calls": len(times),
        "median_ms": statistics.median(times),
        "clock_mhz": [min(clocks), max(clocks)] if clocks else None,
        "limited_share": sum(1 for *_, lim in reads if lim) / len(reads),
        "windows": window_spreads(times),
        "clock_trace": [mhz for _, mhz, _ in reads[:: max(1, len(reads) // 120)]],
    }
    print(f"GEMM after {heat['seconds']:.1f} s heat-up: {len(times)} calls over {RUN_S} s,")
    print(f"median {record['median_ms']:.3f} ms, clock {record['clock_mhz']} MHz,")
    print(f"{record['limited_share']:.0%} of reads power/thermal limited")
    even = f"spread_of_{EVEN_WINDOWS}"
    print(f"{'window ms':>10} {'windows':>8} {'spread':>8} {'cv':>8} {even:>12}")
    for window, row in record["windows"].items():
        print(
            f"{window:>10} {row['windows']:>8} {row['spread']:8.4f} {row['cv']:8.4f}"
            f" {row[even]:12.4f}"
        )
    print("clock trace (MHz):", " ".join(str(c) for c in record["clock_trace"]))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(record, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
