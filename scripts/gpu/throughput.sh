#!/usr/bin/env bash
# Issue 16's measurements on the GPU machine, in one device call: everything fidelity.sh runs
# (the timing fidelity table with the peers, a worker's start, with TESTS=1 the GPU tests), how
# long a power-limited GEMM's measurement must last, and the audit profile (a cold and a cached
# `dev` audit of benchmarks/audit_profile.py's solutions, host runtime). Carry
# scratch/gpu-wheels. State outside the repository copy goes to SCRATCH (default /root/ea).
#   scripts/gpu/throughput.sh OUT NAME   -> what fidelity.sh writes, and
#                                           OUT/NAME-{clock-window.*,profile.*,profile-cached.jsonl,timeline-cached.jsonl}
set -u
out=$1 name=$2
"$(dirname "$0")/fidelity.sh" "$out" "$name"
source "$(dirname "$0")/harness-env.sh"
python3 benchmarks/clock_window.py --json "$out/$name-clock-window.json" \
  >"$out/$name-clock-window.txt" 2>&1
python3 benchmarks/audit_profile.py --gpu "$uuid" --out "$scratch/profile" \
  --json "$out/$name-profile.json" >"$out/$name-profile.txt" 2>&1
cp "$scratch/profile/results.cached.jsonl" "$out/$name-profile-cached.jsonl"
cp "$scratch/profile.timeline.cached.jsonl" "$out/$name-timeline-cached.jsonl"
tail -n 40 "$out/$name-clock-window.txt" "$out/$name-profile.txt"
