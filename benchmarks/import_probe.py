"""What importing a library costs a worker, and whether it touches CUDA as it is imported.

For each module, in fresh interpreters (torch imported first, as in every worker): the seconds
the import took after torch's, whether torch's CUDA was initialised by it, and whether a child
forked after it can still use CUDA (None where there is no GPU). The last decides whether a
fork server may import it ahead of its workers (docs/harness.md, Isolation).

    python benchmarks/import_probe.py [--rounds 3] [--json OUT.json] MODULE ...
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PROBE = """
import importlib, json, os, sys, time
import torch
began = time.perf_counter()
try:
    importlib.import_module(sys.argv[1])
    error = None
except Exception as exc:
    error = f"{type(exc).__name__}: {exc}"[:300]
import_s = time.perf_counter() - began
initialised = torch.cuda.is_initialized()
child = os.fork()
if child == 0:
    try:
        torch.ones(1, device="cuda").add_(1).item()
        os._exit(0)
    except Exception:
        os._exit(1 if torch.cuda._is_in_bad_fork() else 2)  # refused after the fork; no GPU
_, status = os.waitpid(child, 0)
usable = {0: True, 1: False}.get(os.waitstatus_to_exitcode(status))
print(json.dumps({"import_s": import_s, "cuda_initialised": initialised,
                  "fork_can_use_cuda": usable, "error": error}))
"""


def probe(module: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("modules", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    found = {m: [probe(m) for _ in range(args.rounds)] for m in args.modules}
    for module, runs in found.items():
        times = [r["import_s"] for r in runs if "import_s" in r]
        span = f"{min(times):.2f}-{max(times):.2f} s" if times else "n/a"
        flags = {
            k: sorted({r.get(k) for r in runs}) for k in ("cuda_initialised", "fork_can_use_cuda")
        }
        errors = sorted({r["error"] for r in runs if r.get("error")})
        print(f"{module}: import {span}, {flags}{', ' + errors[0] if errors else ''}")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
