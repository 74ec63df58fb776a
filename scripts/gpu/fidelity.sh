#!/usr/bin/env bash
# Issue 16's timing measurements, in one device call: the fidelity table with the peers, a
# worker's start part by part, and with TESTS=1 the GPU tests of timing, faults, the input draw,
# the environment scan and the fork server. Carry scratch/gpu-wheels.
#   scripts/gpu/fidelity.sh OUT NAME   -> OUT/NAME-{gpu.txt,fidelity.*,worker-start.*,tests.txt}
set -u
out=$1 name=$2
mkdir -p "$out"
source "$(dirname "$0")/harness-env.sh"
nvidia-smi --query-gpu=uuid,clocks.sm,temperature.gpu,power.draw --format=csv >"$out/$name-gpu.txt"
python3 benchmarks/timing_fidelity.py --peers --json "$out/$name-fidelity.json" \
  >"$out/$name-fidelity.txt" 2>&1
python3 benchmarks/worker_start.py --json "$out/$name-worker-start.json" \
  >"$out/$name-worker-start.txt" 2>&1
if [ -n "${TESTS:-}" ]; then
  python3 -m pytest -q -p no:cacheprovider tests/harness/test_timing.py tests/harness/test_gpu_faults.py \
    tests/harness/test_inputs.py tests/harness/test_environment.py tests/runtime/test_forkserver.py \
    >"$out/$name-tests.txt" 2>&1
  tail -n 3 "$out/$name-tests.txt"
fi
tail -n 45 "$out/$name-fidelity.txt" "$out/$name-worker-start.txt"
