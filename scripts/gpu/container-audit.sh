#!/usr/bin/env bash
# On the GPU machine: bring the engine up, import the machine's stack as the gpu-host-stack base,
# build torch-2.11-cu130's image over it (verified against the lock), then run each solution's
# dev suite twice, back to back: in its container (--runtime docker) and on the host interpreter
# (--runtime host), so the two runtimes' figures can be compared side by side.
#   scripts/gpu/container-audit.sh OUT BUDGET_S SOLUTION...
# Carry scratch/docker-engine (scripts/gpu/fetch-docker-packages.sh) and scratch/gpu-wheels (the
# docker SDK wheel: the machine has no network). Everything goes to OUT: steps.txt with the wall
# time of each step, docker.jsonl and host.jsonl (result lines), doctor.txt, build.txt.
set -u
out=$1 budget=$2
shift 2
mkdir -p "$out"
steps="$out/steps.txt"
source "$(dirname "$0")/steps.sh"
scratch=${ENGINE_SCRATCH:-/root/ead}
eval "$(scripts/gpu/docker-up.sh "$scratch" scratch/docker-engine/docker-engine.tar.xz)"
python3 -m pip install --quiet --no-deps --no-index --target /root/envaudit-pylib \
  scratch/gpu-wheels/*.whl 2>>"$out/pip.txt"
export PYTHONPATH=$PWD/src:/root/envaudit-pylib
export ENVAUDIT_CACHE=/root/envaudit-cache ENVAUDIT_STORE=/root/envaudit-store
export ENVAUDIT_NVIDIA_DRIVER_DIR=/usr/local/nvidia
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
step doctor python3 -m envaudit doctor
step base python3 -m envaudit base build gpu-host-stack || exit 1
step build python3 -m envaudit build --env torch-2.11-cu130 --over gpu-host-stack \
  ${REBUILD:+--no-cache} || exit 1
image=envaudit/torch-2.11-cu130:46004ac9aa25ac57-on-gpu-host-stack
step probe docker run --rm --read-only --tmpfs /tmp:rw,exec,mode=1777 --user 10001:10001 \
  --network none "$image" sh -c 'id; ls -ld / /tmp /var/tmp; touch /tmp/x && echo tmp-ok'
cat "$out/probe.txt" >>"$steps"
step build-again python3 -m envaudit build --env torch-2.11-cu130 --over gpu-host-stack
start=$(date +%s)
common=(--gpu "$uuid" --suite dev --graph-timing --timeout 150)
for s in "$@"; do
  if [ $(( $(date +%s) - start )) -ge "$budget" ]; then echo "skipped $s (budget)" | tee -a "$steps"; continue; fi
  step "docker-$s" python3 -m envaudit run --solution "$s" --runtime docker --over gpu-host-stack \
    "${common[@]}" --reference-cache /root/refcache-docker --report "$out/docker.jsonl"
  step "host-$s" python3 -m envaudit run --solution "$s" --runtime host \
    "${common[@]}" --reference-cache /root/refcache-host --report "$out/host.jsonl"
done
docker images --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' >"$out/images.txt"
# The device tool brings back few files: pack the logs.
tar -C "$out" -czf "$out/logs.tgz" --exclude=logs.tgz --exclude='*.jsonl' . 2>/dev/null
find "$out" -mindepth 1 -maxdepth 1 ! -name '*.jsonl' ! -name logs.tgz ! -name steps.txt -exec rm -rf {} +
