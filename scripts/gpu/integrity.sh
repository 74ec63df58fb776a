#!/usr/bin/env bash
# On the GPU machine: the GPU half of the integrity work (issue 44). The cheats of
# tests/harness/test_reach.py (garbage collector, frames, a waiting thread, a patched
# comparison, a forged progress line, a cache by storage address) run on the GPU and must all
# fail; memory one process freed must read clean in the next; then the fault suite as before,
# and a FlashInfer-Bench cuda/torch-binding solution compiled with the machine's nvcc and run.
# With OLD_SRC=DIR (the src folder of the commit before the judge, 2bd60f8:
# `git archive 2bd60f8 src | tar x -C DIR`, carried), also the judge's cost: the dev audit of
# a few solutions, new/old/old/new, cold and cached (benchmarks/judge_overhead.py).
#   scripts/gpu/integrity.sh OUT
# Carry scratch/gpu-wheels (envaudit's Python deps, as for profile-ab.sh).
set -u
out=$1
mkdir -p "$out"
steps="$out/steps.txt"
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/harness-env.sh"
export PYTHONPATH=$PWD:$PYTHONPATH
step reach python3 -m pytest -q -m gpu tests/harness/test_gpu_reach.py tests/harness/test_reach.py
step faults python3 -m pytest -q -m gpu tests/harness/test_gpu_faults.py
step native python3 -m pytest -q -m gpu tests/harness/test_native_cuda.py
if [ -n "${OLD_SRC:-}" ]; then
  step overhead python3 benchmarks/judge_overhead.py --old "$OLD_SRC" --gpu "$uuid" \
    --runtime host --suite dev --order new,old,old,new --json "$out/judge-overhead.json" \
    --solution gemm_bf16_n6144_k4096-torch --solution dense_attention_h16_d72-torch \
    --solution sparse_gqa_decode_h32_kv8_d128_ps64_topk2048-triton \
    --solution gdn_prefill_qk4_v8_d128_k_last-triton
fi
