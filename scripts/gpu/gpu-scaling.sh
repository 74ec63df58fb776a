#!/usr/bin/env bash
# On a machine with two GPUs: the same audit on one GPU, then on both, with the machine's own
# interpreter (--runtime host), each cold (its own caches), timed; lines and walls to OUT. Two GPUs of one model share
# the audit's jobs (runtime/scheduling/audit.py), so the ratio of the two walls is the scaling.
#   scripts/gpu/gpu-scaling.sh OUT SOLUTION...
# Needs envaudit's Python deps importable (PYTHONPATH), as library-session.sh `up` provides.
set -u
out=$1
shift
mkdir -p "$out"
mapfile -t uuids < <(nvidia-smi --query-gpu=uuid --format=csv,noheader)
[ "${#uuids[@]}" -ge 2 ] || { echo "needs two GPUs, found ${#uuids[@]}" >&2; exit 2; }
args=(--runtime host --suite dev --timeout 300)
for s in "$@"; do args+=(--solution "$s"); done
for n in 1 2; do
    gpus=()
    for ((i = 0; i < n; i++)); do gpus+=(--gpu "${uuids[$i]}"); done
    start=$(date +%s.%N)
    # each run cold: its own compile caches and reference cache (under its --out)
    ENVAUDIT_CACHE=$out/cache-$n python3 -m envaudit audit "${args[@]}" "${gpus[@]}" \
        --out "$out/gpus-$n" >"$out/gpus-$n.txt" 2>&1
    rc=$?
    echo "gpus=$n rc=$rc wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" \
        | tee -a "$out/scaling.txt"
done
