#!/usr/bin/env bash
# On the GPU machine, over one lease of two or three device calls: the chained graph that bounds
# the graph figure (issue 56, docs/harness.md "Timing integrity" item 3). A driver in its own
# session runs, in order: the GPU cheats (tests/harness/test_gpu_timing_integrity.py, the
# batching captures among them), benchmarks/graph_batching.py (how far honest graph figures lie
# from their bounds), the other GPU harness tests (chain, faults, timing), then the host
# solutions' dev suites (scripts/gpu/dev_suite.sh, graph
# timing: none may be flagged), each step timed in STATE/steps.txt. A device call lasts at most
# 10 minutes; the driver outlives it while the lease is held, and the next call polls.
#   scripts/gpu/capture-batching.sh start STATE DEV_BUDGET_S LIST   LIST: solutions, one a line
#   scripts/gpu/capture-batching.sh poll STATE SECONDS DEST          wait for the driver, then
#                                         copy what there is to DEST (the call's $OUT)
# Carry scratch/gpu-wheels.
set -u
cmd=$1 state=$2
shift 2
here=$(dirname "$0")
source "$here/parts.sh"
case $cmd in
  start)
    mkdir -p "$state/repo"
    grep -v '^$' "$2" >"$state/solutions.txt"
    # a snapshot of the tree: the next call syncs the repository copy afresh under it
    cp -r src scripts solutions workloads locks containers tests benchmarks pyproject.toml \
      "$state/repo/"
    mkdir -p "$state/repo/scratch" && cp -r scratch/gpu-wheels "$state/repo/scratch/"
    (cd "$state/repo" && setsid bash scripts/gpu/capture-batching.sh drive "$state" "$1" \
      >"$state/driver.log" 2>&1 </dev/null &)
    echo "driver started"
    ;;
  drive)
    out=$state steps=$state/steps.txt
    source "$here/steps.sh"
    source "$here/harness-env.sh"
    export PYTHONPATH=$PWD:$PYTHONPATH
    nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.limit --format=csv \
      >"$state/gpu.txt"
    step cheats timeout 420 python3 -m pytest -q -p no:cacheprovider -m gpu \
      tests/harness/test_gpu_timing_integrity.py
    step probe timeout 300 python3 benchmarks/graph_batching.py --json "$state/graph-batching.json"
    step faults timeout 360 python3 -m pytest -q -p no:cacheprovider -m gpu \
      tests/harness/test_chain.py tests/harness/test_gpu_faults.py tests/harness/test_timing.py
    mapfile -t solutions <"$state/solutions.txt"
    step dev env CHEATS=0 bash scripts/gpu/timing-integrity.sh "$state/ti" "$1" "${solutions[@]}"
    touch "$state/done"
    ;;
  poll)
    wait_for_file "$state/done" "$1"
    cat "$state/steps.txt" 2>/dev/null
    tail -5 "$state/driver.log"
    dest=${2:-}
    if [ -n "$dest" ]; then
      mkdir -p "$dest"
      tar czf "$dest/capture-batching.tgz" -C "$state" --exclude=repo --exclude='*.logs.tgz' .
      cp "$state"/cheats.txt "$state"/probe.txt "$dest/" 2>/dev/null
      tail -n 40 "$state/cheats.txt" "$state/probe.txt" "$state/faults.txt" "$state/dev.txt" \
        2>/dev/null
    fi
    ;;
  *)
    echo "unknown step $cmd" >&2
    exit 2
    ;;
esac
