#!/usr/bin/env bash
# Issue 46 item 1 on the GPU machine, in one device call: DeepGEMM 2.6.1 (locks/deepgemm-2.6.1,
# 54e22612 standing in for the audit's 1fc9c669) beside torch on the dense BF16 GEMMs and the
# grouped GEMMs. Host runtime: the machine's torch 2.11 stack, checked against the lock on every
# line, with the machine's CUDA 13.0 toolkit as CUDA_HOME (nvcc 13.0.88, the lock's toolchain
# version) for DeepGEMM's JIT; the wheel is the one `envaudit lock deepgemm-2.6.1` built here,
# carried in scratch/dg (with scratch/gpu-wheels, envaudit's deps the machine lacks).
#   scripts/gpu/deepgemm.sh OUT
# Steps (wall times in OUT/steps.txt):
#   install  the wheel under SCRATCH/dg, on PYTHONPATH
#   probe    versions (torch, deep_gemm, nvcc, g++) and one bf16_gemm_nt against torch
#   audit    the `all` suite of every solution below, one job at a time, at most AUDIT_S seconds
#            (default 240); lines to OUT/deepgemm-all.jsonl. DeepGEMM's JIT compiles each kernel
#            configuration on its first call (3.3 s for the probe's on the H100, 2026-12-06), inside
#            the harness's untimed warm-up, into the env's JIT folder (DG_JIT_CACHE_DIR). No
#            parallel prewarm: the GPU's lease refuses a second job ("GPU ... is in use").
# scratch/dg holds the lock's deep_gemm wheel (built here) and apache-tvm-ffi 0.1.11 (sha256 as
# locked), which the machine lacks; scratch/gpu-wheels holds only what envaudit itself imports
# and the machine lacks (docker, pydantic and its deps): a wheel there that the lock also pins
# shadows the machine's copy and every line says "not the declared env".
set -u
out=$1
mkdir -p "$out"
steps=$out/steps.txt
source "$(dirname "$0")/steps.sh"
source "$(dirname "$0")/harness-env.sh"
export PYTHONPATH=$PWD:$PYTHONPATH:$scratch/dg ENVAUDIT_OFFLINE=1
deepgemm=(
  gemm_bf16_n12288_k4096-deepgemm gemm_bf16_n4096_k12288-deepgemm gemm_bf16_n6144_k4096-deepgemm
  grouped_gemm_bf16_down_n4096_k1536-deepgemm-contiguous
  grouped_gemm_bf16_down_n4096_k1536-deepgemm-masked
  grouped_gemm_bf16_gate_up_n3072_k4096-deepgemm-contiguous
  grouped_gemm_bf16_gate_up_n3072_k4096-deepgemm-masked
)
others=(
  gemm_bf16_n12288_k4096-torch gemm_bf16_n4096_k12288-torch gemm_bf16_n6144_k4096-torch
  grouped_gemm_bf16_down_n4096_k1536-torch grouped_gemm_bf16_down_n4096_k1536-grouped
  grouped_gemm_bf16_gate_up_n3072_k4096-torch grouped_gemm_bf16_gate_up_n3072_k4096-grouped
)
step install python3 -m pip install --no-deps --no-index --target "$scratch/dg" scratch/dg/*.whl
probe() {
  nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
  echo "CUDA_HOME=${CUDA_HOME:-unset}"
  "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" --version | tail -2
  g++ --version | head -1
  DG_JIT_CACHE_DIR=$scratch/dg-probe python3 - <<'EOF'
import time
import deep_gemm
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "deep_gemm", deep_gemm.__version__)
a = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16)
b = torch.randn(6144, 4096, device="cuda", dtype=torch.bfloat16)
d = torch.empty(256, 6144, device="cuda", dtype=torch.bfloat16)
start = time.perf_counter()
deep_gemm.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
print(f"first call (JIT compile + run) {time.perf_counter() - start:.1f} s")
ref = (a.float() @ b.float().T).bfloat16()
print("max abs diff vs fp32 torch", (d.float() - ref.float()).abs().max().item())
print("mk alignment", deep_gemm.get_mk_alignment_for_contiguous_layout())
EOF
}
step probe probe
args=(--runtime host --gpu "$uuid" --suite all --timeout 150 --out "$scratch/audit" --resume)
for s in "${deepgemm[@]}" "${others[@]}"; do args+=(--solution "$s"); done
step audit timeout "${AUDIT_S:-240}" python3 -m envaudit audit "${args[@]}"
cp "$scratch/audit/results.jsonl" "$out/deepgemm-all.jsonl" 2>/dev/null
wc -l "$out/deepgemm-all.jsonl" | tee -a "$steps"
# Logs only: the audit folder also holds the staged inputs (hundreds of MB at M=16384).
(cd "$scratch/audit" && find . -type f -size -1024k ! -name '*.jsonl' -print0 |
  tar --null -T - -czf "$out/audit-logs.tgz")
