#!/usr/bin/env bash
# Issue 16's timing measurements alone, in one device call (throughput.sh without the audit
# profile): the fidelity table with the peers, a worker's start part by part, and with TESTS=1
# the GPU tests of timing, faults, the input draw, the environment scan and the fork server.
# Carry scratch/gpu-wheels.   scripts/gpu/fidelity.sh OUT NAME
set -u
out=$1 name=$2
scratch=${SCRATCH:-/root/ea}
mkdir -p "$out" "$scratch"
python3 -m pip install --quiet --no-deps --no-index --target "$scratch/pylib" scratch/gpu-wheels/*.whl
export PYTHONPATH=$PWD/src:$scratch/pylib PYTHONUNBUFFERED=1 ENVAUDIT_CACHE=$scratch/cache
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
