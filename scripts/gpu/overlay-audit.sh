#!/usr/bin/env bash
# On the GPU machine, over one lease of several device calls: the `all` suite of solutions in
# their containers over the imported machine stack (--runtime docker --over gpu-host-stack),
# where some envs need store entries the machine lacks (DeepGEMM's built wheel and its run-time
# CUDA toolchain). The working tree (~38 MB) leaves about 27 MB a call for anything else, so
# the engine and the store entries come in parts:
#   engine: `split -n 2 -d -a 2 docker-engine.tar.xz part-` beside docker-engine.tar.xz.sha256
#   store:  one tar of store entries (files named by their sha256), `split -b 26M -d -a 2` into
#           part-NN beside wheels.tar.sha256
# A driver, in its own session, brings the engine up and imports the base as soon as the engine
# parts are there (while the store parts are still being carried), fills the store once every
# store part is there, then audits. State lives in STATE, outside the repository copy, alive
# while the lease is.
#   scripts/gpu/overlay-audit.sh start STATE ENGINE_DIR LIST   stash engine parts, start the
#                                        driver for the solutions LIST names (one a line)
#   scripts/gpu/overlay-audit.sh part STATE engine|store DIR   stash more parts
#   scripts/gpu/overlay-audit.sh exec STATE SECONDS CMD...     wait up to SECONDS for the store,
#                                        then run CMD in the session's setting (an empty LIST:
#                                        the driver audits nothing)
#   scripts/gpu/overlay-audit.sh poll STATE SECONDS [DEST]     wait up to SECONDS for the driver
#                                        to end, print its steps, pack what is there to DEST
# NENGINE (default 2) and NSTORE (default 6) are how many parts the driver waits for, SUITE
# (default all) what it audits; the
# driver's steps go to STATE/session/steps.txt (scripts/gpu/library-session.sh does the work).
set -u
cmd=$1 state=$2
shift 2
session=$state/session
here=$(dirname "$0")
source "$here/parts.sh"
mkdir -p "$state/engine" "$state/store" "$session"
case $cmd in
  start)
    cp "$1"/* "$state/engine/"
    grep -v '^$' "$2" >"$state/solutions.txt"
    # The driver outlives this call, and each later call syncs the repository copy afresh: it
    # runs from a snapshot of what it reads, so no sync can pull a file from under it.
    mkdir -p "$state/repo/scratch"
    cp -r src scripts solutions workloads locks containers pyproject.toml "$state/repo/"
    cp -r scratch/gpu-wheels "$state/repo/scratch/"
    (cd "$state/repo" && setsid bash scripts/gpu/overlay-audit.sh drive "$state" \
      >"$state/driver.log" 2>&1 </dev/null &)
    echo "driver started: $(wc -l <"$state/solutions.txt") solutions"
    ;;
  part)
    cp "$2"/* "$state/$1/"
    ls -l "$state/$1"
    ;;
  drive)
    out=$session steps=$session/steps.txt
    source "$here/steps.sh"
    tarball=$state/docker-engine.tar.xz
    join_engine "$state/engine" "${NENGINE:-2}" "$tarball" \
      || { echo "engine parts never came" >>"$steps"; exit 1; }
    ENGINE_TARBALL=$tarball bash "$here/library-session.sh" up "$session"
    wait_for_parts "$state/store" "${NSTORE:-6}" || { echo "store parts never came" >>"$steps"; exit 1; }
    mkdir -p "${SCRATCH:-/root/ea}/stash"
    cp "$state"/store/* "${SCRATCH:-/root/ea}/stash/"
    ENGINE_TARBALL=$tarball bash "$here/library-session.sh" store "$session" \
      || { echo "filling the store failed" >>"$steps"; exit 1; }
    touch "$state/ready"
    mapfile -t solutions <"$state/solutions.txt"
    if [ "${#solutions[@]}" -gt 0 ]; then
      ENGINE_TARBALL=$tarball SUITE=${SUITE:-all} RESUME=1 \
        bash "$here/library-session.sh" audit "$session" - "${solutions[@]}"
    fi
    touch "$state/done"
    ;;
  exec)
    wait_for_file "$state/ready" "$1" || { echo "the session is not ready"; tail -5 "$state/driver.log"; exit 1; }
    shift
    name=${STEP_NAME:-exec}
    ENGINE_TARBALL=$state/docker-engine.tar.xz STEP_NAME=$name \
      bash "$here/library-session.sh" exec "$session" "$@"
    rc=$?
    tail -40 "$session/$name.txt"
    exit $rc
    ;;
  poll)
    wait_for_file "$state/done" "$1"
    cat "$session/steps.txt" 2>/dev/null
    wc -l "$session"/audit-*/results.jsonl 2>/dev/null
    tail -3 "$state/driver.log"
    [ -n "${2:-}" ] && bash "$here/library-session.sh" pack "$session" "$2"
    ;;
  *)
    echo "unknown step $cmd" >&2
    exit 2
    ;;
esac
