#!/usr/bin/env bash
# On the GPU machine, over several device calls of one lease: bring the engine up and import the
# machine's stack, take in the wheels carried in parts, then audit library solutions in their
# own images over that stack. Each call runs one step; state lives outside the repository copy
# (SCRATCH, default /root/ea) and survives only while the machine stays held.
#   scripts/gpu/library-session.sh up OUT                  engine, envaudit's Python deps, base
#                                                          (BASE, default gpu-host-stack)
#   scripts/gpu/library-session.sh stash OUT FOLDER...     copy carried parts into the stash
#   scripts/gpu/library-session.sh store OUT               join and verify the parts, fill the store
#   scripts/gpu/library-session.sh audit OUT ENV_OVERRIDE|- SOLUTION...
#                                                          build the images missing, run the dev
#                                                          suite of each solution (in ENV_OVERRIDE
#                                                          when given), lines to OUT/audit-<env>/
#   ENVS="A B" scripts/gpu/library-session.sh alternate OUT SOLUTION...
#                                                          ROUNDS rounds (default 5, numbered
#                                                          from FIRST_ROUND) of `run` for
#                                                          every SOLUTION in env A and env B, the
#                                                          env order swapped each round, suite
#                                                          SUITE (default all), graph timing;
#                                                          lines appended to OUT/alternate/<env>.jsonl
#   scripts/gpu/library-session.sh envaudit OUT ARGS...     any envaudit command in the session's
#                                                          setting (engine, store, cache)
#   STEP_NAME=N scripts/gpu/library-session.sh exec OUT CMD...  any command in that setting,
#                                                          its output to OUT/N.txt
#   scripts/gpu/library-session.sh scaling OUT SOLUTION... scripts/gpu/gpu-scaling.sh (two GPUs)
#   scripts/gpu/library-session.sh pack OUT DEST           each audit's result files to DEST (few
#                                                          files, as the device tool wants) and
#                                                          the logs, less reference caches, in a tar
# Carry scratch/docker-engine and scratch/gpu-wheels with `up`, and with `stash` the parts of one
# tar of store entries (files named by their sha256, as in the store), cut by `split -b` into
# part-NN files, with wheels.tar.sha256 beside the first: fewer calls than one folder per wheel.
# `store` rejoins the parts, checks the tar's hash and every entry's, and fills the store.
# OUT/steps.txt gets the wall time of every step. ENGINE_TARBALL names the engine's archive when
# it is not scratch/docker-engine/docker-engine.tar.xz.
set -u
cmd=$1 out=$2
shift 2
mkdir -p "$out"
scratch=${SCRATCH:-/root/ea}
steps="$out/steps.txt"
source "$(dirname "$0")/steps.sh"
export ENVAUDIT_STORE=$scratch/store
setup() {
  eval "$(scripts/gpu/docker-up.sh "$scratch/d" "${ENGINE_TARBALL:-scratch/docker-engine/docker-engine.tar.xz}")" || exit 1
  export PYTHONPATH=$PWD/src:$scratch/pylib
  export ENVAUDIT_CACHE=$scratch/cache ENVAUDIT_OFFLINE=1
  export ENVAUDIT_NVIDIA_DRIVER_DIR=/usr/local/nvidia PYTHONUNBUFFERED=1
}
case $cmd in
  up)
    step engine setup
    setup
    step pylib python3 -m pip install --quiet --no-deps --no-index --target "$scratch/pylib" \
      scratch/gpu-wheels/*.whl
    step doctor python3 -m envaudit doctor
    step base python3 -m envaudit base build "${BASE:-gpu-host-stack}"
    ;;
  stash)
    mkdir -p "$scratch/stash"
    for folder in "$@"; do step "stash-$(basename "$folder")" cp -r "$folder"/. "$scratch/stash/"; done
    du -sh "$scratch/stash" | tee -a "$steps"
    ;;
  store)
    stash=$scratch/stash
    cat "$stash"/part-* >"$stash/wheels.tar"
    [ "$(sha256sum "$stash/wheels.tar" | cut -c1-64)" = "$(cat "$stash/wheels.tar.sha256")" ] \
      || { echo "the rejoined tar does not match its sha256" | tee -a "$steps"; exit 1; }
    mkdir -p "$ENVAUDIT_STORE/sha256"
    step untar tar -C "$ENVAUDIT_STORE/sha256" -xf "$stash/wheels.tar" || exit 1
    for f in "$ENVAUDIT_STORE"/sha256/*; do
      [ "$(sha256sum "$f" | cut -c1-64)" = "$(basename "$f")" ] || { echo "bad entry $f" | tee -a "$steps"; rm -f "$f"; }
    done
    rm -rf "$stash"
    ls "$ENVAUDIT_STORE/sha256" | wc -l | sed 's/$/ artifacts in the store/' | tee -a "$steps"
    ;;
  audit)
    setup
    env=$1
    shift
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    args=(--runtime docker --over gpu-host-stack --gpu "$uuid" --suite "${SUITE:-dev}"
      --timeout 600 --out "$out/audit-${env//[^a-z0-9.]/_}" ${AUDIT_FLAGS:-})
    [ "$env" != - ] && args+=(--env "$env")
    [ -n "${RESUME:-}" ] && args+=(--resume)
    for s in "$@"; do args+=(--solution "$s"); done
    step "audit-${env//[^a-z0-9.]/_}" ${AUDIT_TIMEOUT:+timeout "$AUDIT_TIMEOUT"} \
      python3 -m envaudit audit "${args[@]}"
    docker images --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' >"$out/images.txt"
    ;;
  alternate)
    setup
    read -r -a envs <<<"${ENVS:?ENVS must name two envs}"
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    mkdir -p "$out/alternate"
    first=${FIRST_ROUND:-1}
    for ((round = first; round < first + ${ROUNDS:-5}; round++)); do
      order=("${envs[@]}")
      ((round % 2 == 0)) && order=("${envs[1]}" "${envs[0]}")
      for env in "${order[@]}"; do
        for s in "$@"; do
          step "alternate-$round-$env-${s%%-*}" python3 -m envaudit run --runtime docker \
            --over gpu-host-stack --gpu "$uuid" --env "$env" --solution "$s" \
            --suite "${SUITE:-all}" --graph-timing --timeout 600 \
            --reference-cache "$scratch/reference-cache" --report "$out/alternate/$env.jsonl"
        done
      done
    done
    docker images --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' >"$out/images.txt"
    ;;
  envaudit)
    setup
    step "envaudit-$1" python3 -m envaudit "$@"
    ;;
  exec)
    setup
    step "${STEP_NAME:-exec}" "$@"
    ;;
  scaling)
    setup
    step scaling scripts/gpu/gpu-scaling.sh "$out/scaling" "$@"
    ;;
  pack)
    dest=$1
    mkdir -p "$dest"
    for d in "$out"/audit-*/; do
      [ -d "$d" ] || continue
      n=$(basename "$d")
      cp "$d/results.jsonl" "$dest/$n.jsonl"
      cp "$d/results.distributions.jsonl" "$dest/$n.distributions.jsonl" 2>/dev/null
    done
    for f in "$out"/alternate/*.jsonl; do
      [ -f "$f" ] && cp "$f" "$dest/alternate-$(basename "$f")"
    done
    tar -C "$out" -czf "$dest/logs.tgz" --exclude=reference-cache --exclude='*.jsonl' .
    ;;
  *)
    echo "unknown step $cmd" >&2
    exit 2
    ;;
esac
