#!/usr/bin/env bash
# Run solutions' dev suites on this machine's first GPU through `envaudit run --runtime host`.
#   scripts/gpu/dev_suite.sh REPORT BUDGET_S [SOLUTION...]
# All result lines go to REPORT (one file: the device tool brings back few files). No new
# solution starts once BUDGET_S seconds have passed, so the call ends inside its time limit;
# the skipped ones are listed at the end. Worker logs are packed into REPORT.logs.tgz.
set -u
report=$1 budget=$2
shift 2
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
if [ $# -gt 0 ]; then solutions=("$@"); else
  mapfile -t solutions < <(ls solutions/*/solution.json | xargs -n1 dirname | xargs -n1 basename)
fi
start=$(date +%s)
skipped=()
for s in "${solutions[@]}"; do
  if [ $(( $(date +%s) - start )) -ge "$budget" ]; then skipped+=("$s"); continue; fi
  t0=$(date +%s)
  python3 -m envaudit run --solution "$s" --runtime host --gpu "$uuid" --suite dev \
    --graph-timing --reference-cache /tmp/envaudit-refcache --report "$report" --timeout 150 \
    > "/tmp/run-$s.txt" 2>&1
  rc=$?
  echo "$s rc=$rc $(( $(date +%s) - t0 ))s"
  [ "$rc" = 2 ] && tail -3 "/tmp/run-$s.txt"
done
echo "skipped (budget): ${skipped[*]:-none}"
logs="${report%.jsonl}.logs"
[ -d "$logs" ] && tar -C "$(dirname "$logs")" -czf "$report.logs.tgz" "$(basename "$logs")" && rm -rf "$logs"
python3 - "$report" <<'PY'
import json, sys, collections
counts = collections.Counter()
for raw in open(sys.argv[1]):
    try:
        line = json.loads(raw)
    except ValueError:
        continue
    counts[(line["solution"], line["status"])] += 1
for (sol, status), n in sorted(counts.items()):
    print(f"{sol:60} {status:22} {n}")
PY
