"""A worker's CUDA context made beside its preload, against one after the other (GPU only).

A worker makes its CUDA context and imports what its solution's first call needs
(envaudit.harness.preload, here Triton's set-up). torch makes the context holding the
interpreter lock; envaudit.harness.context makes it through the driver on a thread, which
releases the lock, so the imports run beside it. Three orders, each in a child forked from a
parent that has imported torch and the harness (as the fork server has) and in a fresh
interpreter (as a container's worker is), alternated over rounds:

  sequential    torch's init, then the preload (the worker's order before)
  beside        context_beside, the preload, then torch's init (the worker's order now)
  torch_thread  torch's init on a thread beside the preload (what holding the lock costs)

    python benchmarks/context_beside.py --rounds 6 --json OUT/context-beside.json

Each child reports the seconds from its start until the preload is done and torch can launch
(a first tiny kernel included); the table gives the median per order and process kind. The
parent never touches CUDA (a child forked after that could not use it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

from envaudit.harness import worker  # noqa: F401 - the fork server's parent holds it
from envaudit.harness.context import context_beside
from envaudit.harness.preload import import_modules
from envaudit.schema.sources import TRITON

ORDERS = ("sequential", "beside", "torch_thread")


def torch_ready(device: torch.device) -> None:
    torch.cuda.set_device(device)
    torch.cuda.init()


def run_order(order: str) -> dict[str, float]:
    """In this process: the order's steps, timed."""
    device = torch.device("cuda:0")
    began = time.perf_counter()
    seen: dict[str, float] = {}
    if order == "sequential":
        torch_ready(device)
        seen["torch_init"] = time.perf_counter() - began
    helper = None
    if order == "beside":
        helper = context_beside(device)
    elif order == "torch_thread":
        helper = threading.Thread(target=torch_ready, args=(device,))
        helper.start()
    preload_began = time.perf_counter()
    import_modules(frozenset({TRITON}))
    seen["preload"] = time.perf_counter() - preload_began
    if helper is not None:
        helper.join()
    if order == "beside":
        init_began = time.perf_counter()
        torch_ready(device)
        seen["torch_init"] = time.perf_counter() - init_began
    torch.ones(1, device=device).add_(1).item()
    seen["total"] = time.perf_counter() - began
    return seen


def forked(order: str) -> dict[str, float]:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            os.write(write, json.dumps(run_order(order)).encode())
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 16):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data) if data else {"error": 1.0}


def fresh(order: str) -> dict[str, float]:
    """A new interpreter that imports torch and the harness first (not timed), then the order."""
    code = (
        "import json, sys; sys.path[:0] = [sys.argv[2]]; "
        "from benchmarks.context_beside import run_order; "
        "print(json.dumps(run_order(sys.argv[1])))"
    )
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-c", code, order, root], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"error": 1.0}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if shutil.which("nvidia-smi") is None:  # torch's own check would poison the forks
        raise SystemExit("needs a CUDA GPU")
    rows = []
    for round_ in range(args.rounds):
        for kind, run in (("forked", forked), ("fresh", fresh)):
            for order in ORDERS if round_ % 2 == 0 else ORDERS[::-1]:
                rows.append({"round": round_, "kind": kind, "order": order, **run(order)})
                time.sleep(0.2)
    print(f"{'process':8} {'order':13} {'total s':>8} {'preload s':>10} {'torch init s':>13} runs")
    summary = []
    for kind in ("forked", "fresh"):
        for order in ORDERS:
            got = [
                r for r in rows if r["kind"] == kind and r["order"] == order and "error" not in r
            ]
            if not got:
                continue
            med = {
                key: statistics.median(r[key] for r in got if key in r)
                for key in ("total", "preload", "torch_init")
                if any(key in r for r in got)
            }
            summary.append({"kind": kind, "order": order, "runs": len(got), **med})
            init = f"{med['torch_init']:13.3f}" if "torch_init" in med else f"{'-':>13}"
            print(
                f"{kind:8} {order:13} {med['total']:8.3f} {med['preload']:10.3f} {init} {len(got)}"
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
