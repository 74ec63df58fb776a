"""Where does a line's two-valued graph reading come from: the process, the capture, or a copy?

FA4's dense attention `dev-b1-s4096` reads either ~0.178 ms (tight after 10 replays) or ~0.191 ms
(160 replays to tighten) in graph mode, in quiet runs too (docs/lab/audit-throughput.md, s56-s57),
while its eager reading holds at ~0.183 ms. This runs one solution's workload in N fresh processes;
each times it with the harness's own eager and graph timers, then captures and times the graphs
several more times, keeping every replay's time beside the graph it ran (so the input copies it
read), and finally times variants that each remove one suspect: graphs whose calls all read one
copy, and replays without the L2 flush before them. If the mode is the process's, every capture
in it reads the same; if it is the capture's (where its calls' outputs were put), the captures
of one process differ; if it is one copy's, one graph index stands out.

    python benchmarks/graph_modes.py --gpu GPU-<uuid> --solution dense_attention_h16_d72-fa4 \\
        --workload dev-b1-s4096 --processes 10 --json OUT.json

The libraries the solution imports must be importable (PYTHONPATH); nothing here runs in a
container, so this is for the project's own solutions only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTANT_POWER = 186
"""NVML_FI_DEV_POWER_INSTANT: the board's power now, in mW (nvmlDeviceGetPowerUsage averages
over about a second, so it trails a kernel's heat-up by that much)."""
ROOT = Path(__file__).resolve().parents[1]
CAPTURES = 2
"""Graph sets captured again in each process after the harness's own measurement."""
IDLE_S = 3.0
"""Pause before the sustained trace, so it starts from an idle GPU."""
SUSTAINED_MS = 1500.0
"""Back-to-back replays traced for this long, NVML read after every chunk of them."""
REPLAYS = 200
"""Replays timed per capture (spread over its graphs in turn)."""


def _find_workload(label: str, definition: str) -> dict[str, Any]:
    for path in (ROOT / "workloads" / "workloads").rglob(f"{definition}.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            if row["workload"].get("label") == label or row["workload"]["uuid"] == label:
                return dict(row["workload"])
    raise SystemExit(f"no workload {label!r} of {definition}")


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _stats(t: Any) -> dict[str, Any]:
    keep = ("median_ms", "iterations", "stop", "sm_clock_mhz", "sm_clock_range_mhz")
    extra = ("warmup_power_w", "warmup_wall_ms")  # the second is absent before s59's harness
    return (
        {k: getattr(t, k) for k in keep}
        | {k: getattr(t, k, None) for k in extra}
        | {"limited": t.power_limited}
    )


def _nvml_handle() -> Any:
    import pynvml  # type: ignore[import-not-found,import-untyped,unused-ignore]

    pynvml.nvmlInit()
    uuid = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if uuid.startswith("GPU-"):
        return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid)
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)


def _nvml_state(nvml: Any) -> dict[str, Any]:
    """SM clock (MHz), power (W), temperature (C) and the clock event reasons' bits now."""
    pynvml, h = nvml
    return {
        "clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
        "temp_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "reasons": int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
        "power_instant_w": pynvml.nvmlDeviceGetFieldValues(h, [INSTANT_POWER])[0].value.uiVal / 1e3,
    }


def _sustained(graphs: list[Any], calls: int, flush: Any, nvml: Any) -> list[dict[str, Any]]:
    """From idle, replay the graphs back to back (flushing L2 before each, as the harness does)
    for SUSTAINED_MS: per chunk of replays, its per-call time and the NVML state after it."""
    import time

    import torch

    from envaudit.harness.timing import _event_loop

    time.sleep(IDLE_S)
    trace, spent = [], 0.0
    began = time.perf_counter()
    while spent < SUSTAINED_MS:
        raw = _event_loop(lambda i: graphs[i].replay(), 2, len(graphs), flush, len(trace))
        spent += sum(raw)
        trace.append(
            {"t_ms": (time.perf_counter() - began) * 1e3, "per_call_ms": sum(raw) / 2 / calls}
            | _nvml_state(nvml)
        )
    torch.cuda.synchronize()
    return trace


def solution_calls(
    solution_name: str, label: str, device: Any
) -> tuple[Callable[[int], Any], list[dict[str, Any]]]:
    """One of the project's solutions on a workload of its definition: its call on input copy
    i, and the copies (each called once already, as the harness warms them)."""
    import torch

    from envaudit.harness.evaluate import _input_copies
    from envaudit.harness.inputs import materialize_inputs
    from envaudit.harness.solution import load_solution, source_files

    folder = ROOT / "solutions" / solution_name
    solution = json.loads((folder / "solution.json").read_text())
    definition_path = next(
        (ROOT / "workloads" / "definitions").rglob(solution["definition"] + ".json")
    )
    definition = json.loads(definition_path.read_text())
    workload = _find_workload(label, solution["definition"])
    loaded = load_solution(solution, source_files(solution, folder))
    inputs = materialize_inputs(definition, workload, ROOT / "workloads", device)
    copies = _input_copies(inputs, device)

    def launch(i: int) -> Any:
        return loaded.call(copies[i], None, None)

    for i in range(len(copies)):
        launch(i)
    torch.cuda.synchronize(device)
    return launch, copies


def child(solution_name: str, label: str) -> dict[str, Any]:
    """One process: the harness's timers, then the captures kept replay by replay."""
    import torch

    from envaudit.harness.environment import SmClock
    from envaudit.harness.timing import (
        _capture,
        _event_loop,
        flush_buffer,
        time_eager_cuda,
        time_graph_cuda,
    )

    device = torch.device("cuda:0")
    nvml = _nvml_handle()
    start_state = _nvml_state(nvml)
    launch, copies = solution_calls(solution_name, label, device)
    clock = SmClock(device)
    eager = time_eager_cuda(launch, len(copies), device, clock)
    harness_graphs = [
        time_graph_cuda(launch, len(copies), device, clock, eager.median_ms) for _ in range(2)
    ]
    calls = harness_graphs[0].calls_per_sample
    flush = flush_buffer(device)

    def timed(graphs: list[Any], flushed: bool = True) -> list[float]:
        for g in graphs:
            g.replay()
        torch.cuda.synchronize(device)
        if flushed:
            return [
                t / calls
                for t in _event_loop(lambda i: graphs[i].replay(), REPLAYS, len(graphs), flush)
            ]
        empty = torch.empty(0, device=device)
        return [
            t / calls
            for t in _event_loop(lambda i: graphs[i].replay(), REPLAYS, len(graphs), empty)
        ]

    captures = []
    for _ in range(CAPTURES):
        graphs = _capture(launch, len(copies), calls, device)
        samples = timed(graphs)
        clocks = [clock.read()]
        per_graph = [_median(samples[g :: len(graphs)]) for g in range(len(graphs))]
        captures.append(
            {
                "median_ms": _median(samples),
                "per_graph_ms": per_graph,
                "q1_q3_ms": [
                    statistics.quantiles(samples, n=4)[0],
                    statistics.quantiles(samples, n=4)[2],
                ],
                "clock_mhz": clocks,
            }
        )
        del graphs
    one_copy = _capture(lambda i: launch(0), 1, calls, device)
    no_flush = _capture(launch, len(copies), calls, device)
    eager_per_copy = _event_loop(launch, 8 * len(copies), len(copies), flush)
    out0 = launch(0)
    return {
        "start_state": start_state,
        "sustained": _sustained(_capture(launch, len(copies), calls, device), calls, flush, nvml),
        "end_state": _nvml_state(nvml),
        "pid": os.getpid(),
        "copies": len(copies),
        "calls_per_replay": calls,
        "copy_addresses_mod_2mib": [
            [t.data_ptr() % (2 << 20) for t in c.values() if isinstance(t, torch.Tensor)]
            for c in copies
        ],
        "output_address_mod_2mib": out0.data_ptr() % (2 << 20)
        if isinstance(out0, torch.Tensor)
        else None,
        "eager": _stats(eager),
        "harness_graph": [_stats(g) for g in harness_graphs],
        "captures": captures,
        "one_copy_ms": _median(timed(one_copy)),
        "no_flush_ms": _median(timed(no_flush, flushed=False)),
        "eager_per_copy_ms": [
            _median(eager_per_copy[c :: len(copies)]) for c in range(len(copies))
        ],
    }


def _trace_summary(trace: list[dict[str, Any]]) -> str:
    """When NVML first reported a limit, and the clock, power and per-call time at a few points."""
    from envaudit.harness.environment import LIMITING_REASONS

    first = next((r["t_ms"] for r in trace if r["reasons"] & LIMITING_REASONS), None)
    points = []
    for at in (20, 100, 300, 700, 1400):
        r = next((r for r in trace if r["t_ms"] >= at), trace[-1])
        points.append(f"{at}ms {r['clock_mhz']}MHz {r['power_w']:.0f}W {r['per_call_ms']:.4f}")
    limited = "never" if first is None else f"{first:.0f} ms"
    return f"first limited read {limited}; " + ", ".join(points)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", help="GPU UUID (CUDA_VISIBLE_DEVICES for the children)")
    ap.add_argument("--solution", required=True)
    ap.add_argument("--workload", required=True, help="workload label or uuid")
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.solution, args.workload)))
        return
    env = dict(os.environ)
    if args.gpu:
        env["CUDA_VISIBLE_DEVICES"] = args.gpu
    rows = []
    for p in range(args.processes):
        cmd = [
            sys.executable,
            __file__,
            "--child",
            "--solution",
            args.solution,
            "--workload",
            args.workload,
        ]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            print(f"process {p}: exit {done.returncode}\n{done.stderr[-2000:]}", file=sys.stderr)
            continue
        row = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(row)
        hg = " ".join(f"{g['median_ms']:.4f}({g['iterations']})" for g in row["harness_graph"])
        caps = " ".join(f"{c['median_ms']:.4f}" for c in row["captures"])
        per = " | ".join(" ".join(f"{x:.4f}" for x in c["per_graph_ms"]) for c in row["captures"])
        print(
            f"p{p} eager {row['eager']['median_ms']:.4f}({row['eager']['iterations']})"
            f" harness graph {hg}"
            f" captures {caps} one-copy {row['one_copy_ms']:.4f} no-flush {row['no_flush_ms']:.4f}"
            f" eager/copy {min(row['eager_per_copy_ms']):.4f}-{max(row['eager_per_copy_ms']):.4f}"
            f"\n    harness: eager {row['eager']}\n    graph {row['harness_graph']}"
            f"\n    start {row['start_state']} end {row['end_state']}"
            f"\n    per graph: {per}\n    sustained: {_trace_summary(row['sustained'])}",
            flush=True,
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"solution": args.solution, "workload": args.workload, "rows": rows}, indent=2
            )
        )


if __name__ == "__main__":
    main()
