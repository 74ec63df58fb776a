#!/usr/bin/env bash
# On the GPU machine, over one lease of a few device calls: the GPU half of the integrity work
# (scripts/gpu/integrity.sh) and the `all` suite of solutions in their containers over the
# imported machine stack (issue 46: the audit of record). The working tree (~30 MiB) and the
# engine (~45 MB) do not fit one call's 64 MiB together, so the engine comes in parts
# (`split -n 2 -d -a 2 docker-engine.tar.xz part-` beside docker-engine.tar.xz.sha256); the
# driver starts the integrity tests at once and the engine, the base and the audit once every
# part is there. State lives in STATE (outside the repository copy), alive while the lease is.
#   scripts/gpu/record-audit.sh start STATE PARTS_DIR LIST  stash the parts carried in PARTS_DIR,
#                                        start the driver in its own session for the solutions
#                                        LIST names (one a line), return
#   scripts/gpu/record-audit.sh part STATE PARTS_DIR     stash more parts
#   scripts/gpu/record-audit.sh poll STATE SECONDS [DEST]  wait up to SECONDS for the driver to
#                                        end, print its steps and line count, and pack what is
#                                        there to DEST (every call: the machine can go back
#                                        between calls, 30 s idle, and take the state with it)
#   scripts/gpu/record-audit.sh pack STATE DEST          result files and packed logs to DEST
#   scripts/gpu/record-audit.sh host STATE DEST LIST     one call, no engine: the integrity tests,
#                                        then the `all` suite of LIST's solutions on the host
#                                        interpreter (the machine's stack, verified against each
#                                        lock) for at most AUDIT_S seconds (default 400); lines,
#                                        test output and packed logs to DEST
#   NPARTS (default 2) is how many parts the driver waits for.
set -u
cmd=$1 state=$2
shift 2
session=$state/session
source "$(dirname "$0")/parts.sh"
mkdir -p "$state/parts" "$session"
case $cmd in
  start)
    cp "$1"/* "$state/parts/"
    grep -v '^$' "$2" >"$state/solutions.txt"
    setsid bash "$0" drive "$state" >"$state/driver.log" 2>&1 </dev/null &
    echo "driver started: $(cat "$state/solutions.txt" | wc -l) solutions"
    ;;
  part)
    cp "$1"/* "$state/parts/"
    ls -l "$state/parts"
    ;;
  drive)
    out=$session steps=$session/steps.txt
    source "$(dirname "$0")/steps.sh"
    bash "$(dirname "$0")/integrity.sh" "$session/integrity" &
    integrity=$!
    tarball=$state/docker-engine.tar.xz
    join_engine "$state/parts" "${NPARTS:-2}" "$tarball" \
      || { echo "engine parts never came" | tee -a "$steps"; exit 1; }
    ENGINE_TARBALL=$tarball bash "$(dirname "$0")/library-session.sh" up "$session"
    wait "$integrity"
    echo "integrity done" | tee -a "$steps"
    mapfile -t solutions <"$state/solutions.txt"
    ENGINE_TARBALL=$tarball SUITE=all RESUME=1 \
      bash "$(dirname "$0")/library-session.sh" audit "$session" - "${solutions[@]}"
    touch "$state/done"
    ;;
  poll)
    wait_for_file "$state/done" "$1"
    cat "$session/steps.txt" "$session/integrity/steps.txt" 2>/dev/null
    wc -l "$session"/audit-*/results.jsonl 2>/dev/null
    tail -3 "$state/driver.log"
    [ -n "${2:-}" ] && bash "$(dirname "$0")/library-session.sh" pack "$session" "$2"
    ;;
  host)
    dest=$1 list=$2
    mkdir -p "$dest"
    out=$dest steps=$dest/steps.txt
    source "$(dirname "$0")/steps.sh"
    bash "$(dirname "$0")/integrity.sh" "$dest/integrity"
    source "$(dirname "$0")/harness-env.sh"
    export PYTHONPATH=$PWD:$PYTHONPATH
    export ENVAUDIT_OFFLINE=1
    args=(--runtime host --gpu "$uuid" --suite all --timeout 150 --out "$state/host" --resume)
    while read -r s; do [ -n "$s" ] && args+=(--solution "$s"); done <"$list"
    step audit timeout "${AUDIT_S:-400}" python3 -m envaudit audit "${args[@]}"
    cp "$state/host/results.jsonl" "$dest/host-all.jsonl" 2>/dev/null
    wc -l "$dest/host-all.jsonl" | tee -a "$steps"
    tar -C "$state/host" -czf "$dest/host-logs.tgz" --exclude='*.jsonl' . 2>/dev/null
    ;;
  pack)
    bash "$(dirname "$0")/library-session.sh" pack "$session" "$1"
    ;;
  *)
    echo "unknown step $cmd" >&2
    exit 2
    ;;
esac
