#!/usr/bin/env bash
# Issue 16's measurements on the GPU machine, in one device call: the audit profile (a cold and a
# cached `dev` audit of benchmarks/audit_profile.py's solutions, host runtime) and the timing
# fidelity table with the peers. Carry scratch/gpu-wheels (envaudit's Python deps). State
# outside the repository copy goes to SCRATCH (default /root/ea, as in library-session.sh).
#   scripts/gpu/throughput.sh OUT NAME      -> OUT/NAME-profile.{json,txt}, OUT/NAME-fidelity.{json,txt}
# Also how long a power-limited GEMM's measurement must last (OUT/NAME-clock-window.{json,txt})
# and a worker's start part by part (OUT/NAME-worker-start.{json,txt}).
# With TESTS=1, also the GPU tests of timing, faults (forked workers) and the input draw
# -> OUT/NAME-tests.txt
set -u
out=$1 name=$2
scratch=${SCRATCH:-/root/ea}
mkdir -p "$out" "$scratch"
python3 -m pip install --quiet --no-deps --no-index --target "$scratch/pylib" scratch/gpu-wheels/*.whl
export PYTHONPATH=$PWD/src:$scratch/pylib PYTHONUNBUFFERED=1 ENVAUDIT_CACHE=$scratch/cache
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
nvidia-smi --query-gpu=uuid,clocks.sm,temperature.gpu,power.draw --format=csv >"$out/$name-gpu.txt"
python3 benchmarks/timing_fidelity.py --peers --json "$out/$name-fidelity.json" \
  >"$out/$name-fidelity.txt" 2>&1
python3 benchmarks/clock_window.py --json "$out/$name-clock-window.json" \
  >"$out/$name-clock-window.txt" 2>&1
python3 benchmarks/worker_start.py --json "$out/$name-worker-start.json" \
  >"$out/$name-worker-start.txt" 2>&1
python3 benchmarks/audit_profile.py --gpu "$uuid" --out "$scratch/profile" \
  --json "$out/$name-profile.json" >"$out/$name-profile.txt" 2>&1
cp "$scratch/profile/results.cached.jsonl" "$out/$name-profile-cached.jsonl"
cp "$scratch/profile.timeline.cached.jsonl" "$out/$name-timeline-cached.jsonl"
if [ -n "${TESTS:-}" ]; then
  python3 -m pytest -q -p no:cacheprovider tests/harness/test_timing.py tests/harness/test_gpu_faults.py \
    tests/harness/test_inputs.py tests/harness/test_environment.py tests/runtime/test_forkserver.py \
    >"$out/$name-tests.txt" 2>&1
  tail -n 3 "$out/$name-tests.txt"
fi
tail -n 40 "$out/$name-fidelity.txt" "$out/$name-clock-window.txt" "$out/$name-worker-start.txt" \
  "$out/$name-profile.txt"
