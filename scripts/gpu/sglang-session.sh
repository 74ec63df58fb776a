#!/usr/bin/env bash
# SGLang 0.5.22 in its own closure on the GPU machine (issue 55, items 1 and 3), over one lease
# of many device calls: the image of locks/sglang-0.5.22 over the machine's own OS layer
# (`--substitute-base gpu-host-os`: Ubuntu 24.04 and its system Python 3.12 imported as a base,
# the machine's torch venv left out), its whole closure (torch 2.14.1 and its CUDA wheels
# included: 4.11 GiB of store entries, none of them the machine's) carried in parts, built,
# verified exact against the lock, then the `all` suite of the SGLang solutions in it.
# docs/audit/sglang.md ("On the GPU machine") gives the carrying cost and the order of calls.
#
# On a CPU machine with the network, first (SCRATCH names the store there too: 4.1 GiB, and as
# much again for the parts; PYTHON, default .venv/bin/python, runs envaudit):
#   scripts/gpu/sglang-session.sh parts DEST   fetch the closure into the store and cut one tar
#                                              of its store entries (files named by their
#                                              sha256) into DEST/cNNN/part-NNN folders of
#                                              PART_MB MiB (default 24: what a call carries
#                                              beside a 41 MB working tree), with SHA256SUMS
#                                              of the parts in DEST/c000
# On the GPU machine, one step a call (state in SCRATCH, default /root/sg, alive while the
# machine is held: keep the calls coming, ~30 s apart at most):
#   probe OUT            what the plan rests on, before anything costs: os-release, the system
#                        Python and whether it makes a venv with pip, disk, GPU
#   up OUT               engine (carried: scratch/docker-engine), envaudit's Python deps
#                        (carried: scratch/gpu-wheels), `envaudit base build gpu-host-os`
#   stash OUT FOLDER...  carried parts into SCRATCH/stash (one call per part folder)
#   store OUT            the parts checked against SHA256SUMS, untarred into the store as they
#                        stream (no joined copy), every entry rehashed; then
#                        `fetch --offline` says whether the closure is whole
#   build OUT            `envaudit build --solution sglang-0.5.22 --substitute-base
#                        gpu-host-os`, in its own session (it may outlive a call): poll with
#   wait OUT NAME SECONDS  until the background step NAME ends (its rc and the last lines)
#   verify OUT           `envaudit verify-env sglang-0.5.22 --image --exact --substitute-base
#                        gpu-host-os`
#   audit OUT            in the background: the `all` suite of every solutions/*-sglang in
#                        that image (--runtime docker --substitute-base gpu-host-os), lines to
#                        OUT/audit-sglang/; poll with `wait OUT audit SECONDS`
#   others OUT           in the background: the same definitions' solutions of
#                        torch-2.11-cu130 over the machine's stack (--over gpu-host-stack, a
#                        16.5 GB import), on the same card, to OUT/audit-beside/ (a substitute
#                        is one env's declaration: one audit cannot take both)
#   pack OUT DEST        result files and step logs to DEST
# OUT/steps.txt gets the wall time of every step.
set -u
cmd=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
scratch=${SCRATCH:-/root/sg}
steps="$out/steps.txt"
here=$(dirname "$0")
source "$here/steps.sh"
ENV_NAME=sglang-0.5.22
SUB=(--substitute-base gpu-host-os)
export ENVAUDIT_STORE=$scratch/store
setup() {
  eval "$("$here/docker-up.sh" "$scratch/d" "${ENGINE_TARBALL:-scratch/docker-engine/docker-engine.tar.xz}")" || exit 1
  export PYTHONPATH=$PWD/src:$scratch/pylib
  export ENVAUDIT_CACHE=$scratch/cache ENVAUDIT_OFFLINE=1
  export ENVAUDIT_NVIDIA_DRIVER_DIR=/usr/local/nvidia PYTHONUNBUFFERED=1
}
# background NAME CMD...: CMD in its own session (it outlives this call), rc to OUT/NAME.rc. It
# runs from a snapshot of the repository copy (SCRATCH/repo-NAME): each later call syncs the
# copy afresh, and no sync may pull a file from under a running step.
background() {
  local name=$1 repo=$scratch/repo-$1
  shift
  rm -rf "$out/$name.rc" "$repo" && mkdir -p "$repo"
  cp -r src scripts solutions workloads locks containers pyproject.toml "$repo/"
  (cd "$repo" && PYTHONPATH=$repo/src:$scratch/pylib setsid bash -c \
    'source scripts/gpu/steps.sh; out=$1 steps=$2 name=$3; shift 3
     step "$name" "$@"; echo $? >"$out/$name.rc"' _ "$out" "$steps" "$name" "$@" \
    </dev/null >/dev/null 2>&1 &)
  echo "$name started in the background: poll with \`$0 wait $out $name SECONDS\`"
}
sglang_solutions() { for d in solutions/*-sglang; do echo "--solution $(basename "$d")"; done; }
case $cmd in
  parts)
    dest=$out
    export UV_PYTHON_DOWNLOADS=never
    python=${PYTHON:-.venv/bin/python}
    "$python" -m envaudit fetch "$ENV_NAME" "${SUB[@]}" || exit 1
    store=$ENVAUDIT_STORE/sha256
    "$python" - "$ENV_NAME" >"$dest/entries.txt" <<'PY' || exit 1
import sys
from pathlib import Path
from envaudit.lock.files import load_lock
lock = load_lock(Path("locks") / sys.argv[1], "gpu-host-os")
hashes = {p.artifact.sha256 for p in lock.packages}
hashes |= {s.sdist.sha256 for s in lock.sources if s.sdist is not None}
print("\n".join(sorted(hashes)))
PY
    mkdir -p "$dest/split"
    tar -C "$store" -cf - -T "$dest/entries.txt" \
      | split -b "${PART_MB:-24}M" -d -a 3 - "$dest/split/part-" || exit 1
    (cd "$dest/split" && sha256sum part-*) >"$dest/SHA256SUMS"
    i=0
    for part in "$dest"/split/part-*; do
      folder=$(printf '%s/c%03d' "$dest" "$i")
      mkdir -p "$folder" && mv "$part" "$folder/"
      i=$((i + 1))
    done
    mv "$dest/SHA256SUMS" "$dest/entries.txt" "$dest/c000/" && rmdir "$dest/split"
    echo "$i part folders under $dest ($(wc -l <"$dest/c000/entries.txt") store entries)"
    ;;
  probe)
    {
      grep -E '^(ID|VERSION_ID|PRETTY_NAME)=' /etc/os-release
      ls -l /usr/bin/python3 2>&1
      /usr/bin/python3 -c 'import sys; print(sys.version)' 2>&1
      d=$(mktemp -d) && /usr/bin/python3 -m venv "$d/v" >"$d/log" 2>&1 && [ -x "$d/v/bin/pip" ] \
        && echo "venv with pip: yes" || { echo "venv with pip: NO"; tail -n 3 "$d/log"; }
      dpkg-query -W -f '${Package}=${Version}\n' 'python3.12*' python3-pip-whl 2>&1
      readlink -f /opt/torch/.venv/bin/python 2>&1
      du -sh /usr/local/* 2>/dev/null
      df -h / "$scratch" 2>/dev/null
      nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader
    } 2>&1 | tee "$out/probe.txt"
    ;;
  up | stash)  # as for the library envs, over another base and scratch folder
    SCRATCH=$scratch BASE=gpu-host-os bash "$here/library-session.sh" "$cmd" "$out" "$@"
    ;;
  store)
    setup
    stash=$scratch/stash
    (cd "$stash" && sha256sum -c --quiet SHA256SUMS) \
      || { echo "a part is missing or does not match SHA256SUMS" | tee -a "$steps"; exit 1; }
    mkdir -p "$ENVAUDIT_STORE/sha256"
    step untar bash -c 'cat "$1"/part-* | tar -C "$2" -xf -' _ "$stash" "$ENVAUDIT_STORE/sha256" \
      || exit 1
    for f in "$ENVAUDIT_STORE"/sha256/*; do
      [ "$(sha256sum "$f" | cut -c1-64)" = "$(basename "$f")" ] || { echo "bad entry $f" | tee -a "$steps"; rm -f "$f"; }
    done
    rm -rf "$stash"
    ls "$ENVAUDIT_STORE/sha256" | wc -l | sed 's/$/ entries in the store/' | tee -a "$steps"
    step fetch python3 -m envaudit fetch "$ENV_NAME" "${SUB[@]}" --offline
    ;;
  build)
    setup
    background build python3 -m envaudit build --solution "$ENV_NAME" "${SUB[@]}"
    ;;
  wait)
    name=$1
    for _ in $(seq "${2:-500}"); do [ -e "$out/$name.rc" ] && break; sleep 1; done
    if [ -e "$out/$name.rc" ]; then echo "$name ended: rc=$(cat "$out/$name.rc")"; else echo "$name still running"; fi
    tail -n "${TAIL:-15}" "$out/$name.txt" 2>/dev/null
    df -h "$scratch" | tail -1
    ;;
  verify)
    setup
    step verify python3 -m envaudit verify-env "$ENV_NAME" --image --exact "${SUB[@]}"
    docker images --format '{{.Repository}}:{{.Tag}} {{.ID}} {{.Size}}' >"$out/images.txt"
    ;;
  audit)
    setup
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    # shellcheck disable=SC2046
    background audit python3 -m envaudit audit --runtime docker "${SUB[@]}" --gpu "$uuid" \
      --suite "${SUITE:-all}" --timeout 600 --out "$out/audit-sglang" ${RESUME:+--resume} \
      $(sglang_solutions)
    ;;
  others)
    setup
    uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
    args=()
    for d in solutions/*-sglang; do
      definition=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["definition"])' "$d/solution.json")
      for s in solutions/"$definition"-*/solution.json; do
        env=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["env"])' "$s")
        [ "$env" = torch-2.11-cu130 ] && args+=(--solution "$(basename "$(dirname "$s")")")
      done
    done
    background others python3 -m envaudit audit --runtime docker --over gpu-host-stack \
      --gpu "$uuid" --suite "${SUITE:-all}" --timeout 600 --out "$out/audit-beside" \
      ${RESUME:+--resume} "${args[@]}"
    ;;
  pack)
    dest=$1
    mkdir -p "$dest"
    for a in "$out"/audit-*; do
      for f in "$a"/*.jsonl; do [ -e "$f" ] && cp "$f" "$dest/$(basename "$a")-$(basename "$f")"; done
    done
    tar -C "$out" -czf "$dest/logs.tar.gz" --exclude='reference-cache*' --exclude='audit-*' .
    ls -l "$dest"
    ;;
  *)
    echo "unknown step $cmd (see the head of $0)" >&2
    exit 2
    ;;
esac
