"""Whether another process making CUDA contexts on the same GPU moves the harness's timings.

An audit could start a job's worker, and let it make its CUDA context and record its
environment, while the previous job's worker is still measuring, if that does not change what
the previous one measures. This times the calibration kernels of benchmarks/timing_fidelity.py
(1 GiB copy, 8192^3 BF16 GEMM, ~5 us copy; eager and graph, exactly as the harness times
solutions) under three conditions, interleaved repeat by repeat in rotating order:

- quiet: nothing else on the GPU;
- idle: another process holds a CUDA context of its own and does nothing with it (a worker
  waiting at its gate);
- churn: another process makes contexts back to back: each a forked child that initialises
  CUDA through torch, records the environment as a worker does (NVML, device properties) and
  exits (a worker starting, plus the teardown of one ending: more than a waiting worker does).
  With `--churn-import MODULE` (repeatable) each child then imports those modules too, as a
  worker imports its solution's leading libraries before its gate (docs/harness.md): FA4's
  `flash_attn.cute` initialises CUDA as it is imported, for seconds (s52 in
  docs/lab/audit-throughput.md).

Each condition's turn lasts BLOCK_S of back-to-back measurements (a context takes longer to
make than most measurements last). For each kernel and mode: the median over all of a
condition's measurements, its ratio to quiet's, the spread (max/min) of the per-turn medians,
and the share of churn's measuring time during which a child was making its context and
environment record (from the children's own timestamps: the overlap is shown, not assumed).

    python benchmarks/context_overlap.py [--rounds 4] [--churn-import MODULE ...] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from typing import Any

CONDITIONS = ("quiet", "idle", "churn")
BLOCK_S = 1.5


def hold_context(hold: Any, held: Any, stop: Any) -> None:
    """While `hold` is set, keep one CUDA context made through the driver API (no torch: so it
    can be dropped again without ending the process); `held` says whether it exists."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuInit(0)
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)
    ctx = ctypes.c_void_p()
    while not stop.is_set():
        if hold.is_set() and not held.is_set():
            cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev)
            held.set()
        elif not hold.is_set() and held.is_set():
            cuda.cuCtxDestroy_v2(ctx)
            held.clear()
        time.sleep(0.005)


def churn_contexts(
    go: Any, resting: Any, made: Any, stop: Any, stamps: str, imports: tuple[str, ...] = ()
) -> None:
    """While `go` is set, fork children one after the other, each making its CUDA context and
    environment record as a harness worker does, then importing `imports`, then exiting; `made`
    counts them, and each appends the wall-clock span of that work to `stamps`. `resting`: no
    child is alive."""
    import importlib

    import torch

    from envaudit.harness.environment import SmClock, environment_record

    while not stop.is_set():
        if not go.is_set():
            resting.set()
            time.sleep(0.005)
            continue
        resting.clear()
        pid = os.fork()
        if pid == 0:
            began = time.time()
            device = torch.device("cuda", 0)
            torch.cuda.set_device(device)
            torch.cuda.init()
            SmClock(device)
            environment_record(device)
            for module in imports:
                importlib.import_module(module)
            with open(stamps, "a") as handle:
                handle.write(f"{began} {time.time()}\n")
            os._exit(0)
        os.waitpid(pid, 0)
        with made.get_lock():
            made.value += 1


def read_stamps(path: str) -> list[tuple[float, float]]:
    try:
        with open(path) as handle:
            return [(float(a), float(b)) for a, b in (line.split() for line in handle)]
    except OSError:
        return []


def overlap_share(spans: list[tuple[float, float]], making: list[tuple[float, float]]) -> float:
    """The share of the measuring spans during which some child was making its context."""
    total = sum(b - a for a, b in spans)
    covered = sum(
        max(0.0, min(b, d) - max(a, c)) for a, b in spans for c, d in making if c < b and d > a
    )
    return covered / total if total else 0.0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument(
        "--churn-import",
        action="append",
        default=[],
        metavar="MODULE",
        help="each churning child also imports this module after making its context",
    )
    args = parser.parse_args()
    spawn = mp.get_context("spawn")
    stop, hold, held, go, resting = (spawn.Event() for _ in range(5))
    made = spawn.Value("i", 0)
    stamps = f"/tmp/context-overlap-{os.getpid()}.txt"
    helpers = [
        spawn.Process(target=hold_context, args=(hold, held, stop), daemon=True),
        spawn.Process(
            target=churn_contexts,
            args=(go, resting, made, stop, stamps, tuple(args.churn_import)),
            daemon=True,
        ),
    ]
    for helper in helpers:
        helper.start()

    import torch

    from envaudit.harness.timing import time_eager_cuda, time_graph_cuda

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from timing_fidelity import calibration_kernels, clock, heat_up

    device = torch.device("cuda")
    rows = []

    def enter(condition: str) -> None:
        if condition == "idle":
            hold.set()
            while not held.is_set():
                time.sleep(0.005)
        elif condition == "churn":
            before = made.value
            go.set()
            while made.value == before:  # the churner's torch import is done
                time.sleep(0.005)

    def leave() -> None:
        hold.clear()
        go.clear()
        while held.is_set() or not resting.is_set():
            time.sleep(0.005)

    try:
        for name, (launch, copies) in calibration_kernels(device).items():
            heated = heat_up(launch, copies)
            for mode, time_fn in (("eager", time_eager_cuda), ("graph", time_graph_cuda)):
                figures: dict[str, list[float]] = {c: [] for c in CONDITIONS}
                turns: dict[str, list[float]] = {c: [] for c in CONDITIONS}
                spans: list[tuple[float, float]] = []
                for r in range(args.rounds):
                    order = CONDITIONS[r % 3 :] + CONDITIONS[: r % 3]
                    for condition in order:
                        enter(condition)
                        turn = []
                        ended = time.perf_counter() + BLOCK_S
                        while time.perf_counter() < ended:
                            began = time.time()
                            stats = time_fn(launch, copies, device, clock())
                            turn.append(stats.median_ms * 1e3)
                            if condition == "churn":
                                spans.append((began, time.time()))
                        leave()
                        figures[condition] += turn
                        turns[condition].append(statistics.median(turn))
                quiet = statistics.median(figures["quiet"])
                row: dict[str, Any] = {
                    "kernel": name,
                    "mode": mode,
                    "heat_up_s": heated["seconds"],
                    "churn_measure_s": sum(b - a for a, b in spans),
                    "churn_overlap_share": overlap_share(spans, read_stamps(stamps)),
                }
                for condition in CONDITIONS:
                    values = figures[condition]
                    row[condition] = {
                        "median_us": statistics.median(values),
                        "over_quiet": statistics.median(values) / quiet,
                        "spread": max(turns[condition]) / min(turns[condition]),
                        "measurements": len(values),
                        "turns_us": turns[condition],
                    }
                rows.append(row)
                print(
                    f"{name:16} {mode:6} quiet {quiet:10.3f} us spread {row['quiet']['spread']:.4f}"
                    f" | idle x{row['idle']['over_quiet']:.4f} spread {row['idle']['spread']:.4f}"
                    f" | churn x{row['churn']['over_quiet']:.4f} spread"
                    f" {row['churn']['spread']:.4f} (contexts being made"
                    f" {row['churn_overlap_share']:.0%} of {row['churn_measure_s']:.1f} s)",
                    flush=True,
                )
    finally:
        stop.set()
        for helper in helpers:
            helper.join(timeout=5)
    if args.json:
        record = {
            "device": torch.cuda.get_device_name(device),
            "churn_imports": args.churn_import,
            "rows": rows,
        }
        with open(args.json, "w") as handle:
            json.dump(record, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
