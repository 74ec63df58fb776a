"""What a worker's start costs, part by part, in fresh interpreters: the imports (torch, then the
harness), the CUDA context, NVML's first open, the scan of installed distributions (first and
kept), cuDNN's version (which loads the library) and the rest of the environment record. The
audit profile (audit_profile.py) shows these as worker_imports, worker_cuda_init and
worker_env_record; this splits the last two further.

    python benchmarks/worker_start.py [--repeats 3] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any

PROBE = r"""
import json, time
t = time.perf_counter
parts = {}
s = t(); import torch; parts["import_torch"] = t() - s
s = t(); from envaudit.harness import worker, environment; parts["import_harness"] = t() - s
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
s = t()
if device.type == "cuda":
    torch.cuda.set_device(device); torch.cuda.init()
parts["cuda_init"] = t() - s
s = t(); clock = environment.SmClock(device); parts["nvml_open"] = t() - s
s = t(); environment.distributions(); parts["distributions_scan"] = t() - s
s = t(); environment.distributions(); parts["distributions_kept"] = t() - s
s = t(); torch.backends.cudnn.is_available() and torch.backends.cudnn.version()
parts["cudnn_version"] = t() - s
s = t(); environment.environment_record(device); parts["environment_record"] = t() - s
s = t(); environment.clock_state(device); parts["clock_state"] = t() - s
print(json.dumps(parts))
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    runs: list[dict[str, float]] = []
    for _ in range(args.repeats):
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n", file=sys.stderr)
            return 1
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    record: dict[str, Any] = {
        "runs": runs,
        "median_s": {k: statistics.median(r[k] for r in runs) for k in runs[0]},
    }
    for name, value in record["median_s"].items():
        print(f"{name:22} {value * 1e3:9.1f} ms")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(record, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
