#!/usr/bin/env bash
# On the GPU machine: the GPU half of the integrity work (issue 44). The cheats of
# tests/harness/test_reach.py (garbage collector, frames, a waiting thread, a patched
# comparison, a forged progress line, a cache by storage address) run on the GPU and must all
# fail; memory one process freed must read clean in the next; then the fault suite as before.
#   scripts/gpu/integrity.sh OUT
# Carry scratch/gpu-wheels when the machine lacks typer/pydantic (as for dev_suite.sh).
set -u
out=$1
mkdir -p "$out"
steps="$out/steps.txt"
source "$(dirname "$0")/steps.sh"
export PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
step reach python3 -m pytest -q -m gpu tests/harness/test_gpu_reach.py tests/harness/test_reach.py
step faults python3 -m pytest -q -m gpu tests/harness/test_gpu_faults.py
