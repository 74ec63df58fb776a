#!/usr/bin/env bash
# Issue 16's measurements on the GPU machine, in one device call: the audit profile (a cold and a
# cached `dev` audit of benchmarks/audit_profile.py's solutions, host runtime) and the timing
# fidelity table with the peers. Carry scratch/gpu-wheels (envaudit's Python deps).
#   scripts/gpu/throughput.sh OUT NAME      -> OUT/NAME-profile.{json,txt}, OUT/NAME-fidelity.{json,txt}
set -u
out=$1 name=$2
mkdir -p "$out" /root/ea
python3 -m pip install --quiet --no-deps --no-index --target /root/ea/pylib scratch/gpu-wheels/*.whl
export PYTHONPATH=$PWD/src:/root/ea/pylib PYTHONUNBUFFERED=1 ENVAUDIT_CACHE=/root/ea/cache
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
nvidia-smi --query-gpu=uuid,clocks.sm,temperature.gpu,power.draw --format=csv >"$out/$name-gpu.txt"
python3 benchmarks/timing_fidelity.py --peers --json "$out/$name-fidelity.json" \
  >"$out/$name-fidelity.txt" 2>&1
python3 benchmarks/audit_profile.py --gpu "$uuid" --out /root/ea/profile \
  --json "$out/$name-profile.json" >"$out/$name-profile.txt" 2>&1
cp /root/ea/profile/results.cached.jsonl "$out/$name-profile-cached.jsonl"
tail -n 40 "$out/$name-fidelity.txt" "$out/$name-profile.txt"
