#!/usr/bin/env bash
# On the GPU machine: issue 56's GPU half. The cheats of tests/harness/test_gpu_timing_integrity.py
# (slowed events, no work while a graph is captured, a side stream, an answer by call count) must
# fail or pass flagged beside an honest solution that passes unflagged; then the shipped
# solutions' dev suites (host runtime, graph timing) must pass with no timing flag.
#   scripts/gpu/timing-integrity.sh OUT BUDGET_S [SOLUTION...]    (carry scratch/gpu-wheels)
# CHEATS=0 skips the cheat tests (a second call over more solutions). Everything OUT holds but
# the worker logs is also packed into OUT.tgz: the device tool brings back at most 8 files a
# call, so point OUT outside $OUT and copy OUT.tgz there.
set -u
out=$1 budget=$2
shift 2
mkdir -p "$out"
source "$(dirname "$0")/harness-env.sh"
export PYTHONPATH=$PWD:$PYTHONPATH
nvidia-smi --query-gpu=name,uuid,driver_version --format=csv >"$out/gpu.txt"
if [ "${CHEATS:-1}" = 1 ]; then
  timeout 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/harness/test_gpu_timing_integrity.py \
    >"$out/cheats.txt" 2>&1
  tail -n 25 "$out/cheats.txt"
fi
bash scripts/gpu/dev_suite.sh "$out/dev.jsonl" "$budget" "$@" >"$out/dev.txt" 2>&1
tail -n 30 "$out/dev.txt"
python3 - "$out/dev.jsonl" <<'PY'
import json, sys
flagged = passed = 0
bounds = []
for raw in open(sys.argv[1]):
    line = json.loads(raw)
    timing = line.get("timing") or {}
    passed += line["status"] == "PASSED"
    if timing.get("flags") or line["status"] != "PASSED":
        flagged += bool(timing.get("flags"))
        print(line["solution"], line["workload"].get("label"), line["status"], line["message"][:200], timing.get("flags"))
    for mode in ("eager", "graph", "chained_graph"):
        judge = (timing.get(mode) or {}).get("judge")
        if judge:
            print(f'  {line["solution"][:40]:40} {mode:5} window {judge["window_ms"]:9.2f} reported {judge["reported_ms"]:9.2f} allowance {judge["allowance_ms"]:8.2f} checked {judge["checked_calls"]}')
    graph, chained = timing.get("graph"), timing.get("chained_graph")
    if graph and chained and (chained.get("judge") or {}).get("chain_call_ms") is not None:
        chain = chained["judge"]["chain_call_ms"]
        # how far the graph figure lies from its bound: (chained - chain) / graph (flagged
        # above judge.BATCH_RATIO, beside its margin)
        bounds.append((chained["median_ms"] - chain) / graph["median_ms"])
        print(f'  {line["solution"][:40]:40} graph {graph["median_ms"]*1e3:9.3f} us chained {chained["median_ms"]*1e3:9.3f} us chain {chain*1e3:8.3f} us ratio {bounds[-1]:.4f}')
print("passed", passed, "flagged", flagged)
if bounds:
    print(f"(chained - chain) / graph over {len(bounds)} lines: min {min(bounds):.4f} max {max(bounds):.4f}")
PY
tar czf "$out.tgz" -C "$out" --exclude='*.logs.tgz' .
