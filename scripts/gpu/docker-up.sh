#!/usr/bin/env bash
# Bring a Docker engine up on the GPU machine (or any Linux machine where this runs as root).
#   scripts/gpu/docker-up.sh SCRATCH [TARBALL]
# TARBALL (default: scratch/docker-engine/docker-engine.tar.xz in this repository, made by
# scripts/gpu/fetch-docker-packages.sh and carried in by the device tool) is checked against
# TARBALL.sha256 when that file is there, unpacked into SCRATCH/engine, and its dockerd started
# in its own session (setsid: it outlives the command that started it):
#   dockerd --data-root SCRATCH/data --exec-root SCRATCH/exec --iptables=false --bridge=none
#           -H unix://SCRATCH/docker.sock
# with SCRATCH/engine/bin on PATH and SCRATCH/engine/lib on LD_LIBRARY_PATH (its own, not the
# caller's). Keep SCRATCH short: a unix socket path has at most 107 bytes. The data root must
# be on a file system overlay2 can use (ext4, xfs; not overlayfs or tmpfs).
# Prints, on stdout, lines for `eval "$(scripts/gpu/docker-up.sh SCRATCH)"`:
#   export DOCKER_HOST=unix://SCRATCH/docker.sock
#   export PATH=SCRATCH/engine/bin:$PATH
#   # Docker Engine <version> (API <v>), storage <driver>, cgroup v<n>, up in <s> s
# Idempotent: when the engine at that socket answers, it only prints those lines.
# Exit 1: the engine did not come up (the end of SCRATCH/dockerd.log is shown); exit 2: usage;
# exit 3: a binary of the tarball misses a shared library on this machine (ldd).
# DOCKER_UP_TIMEOUT (seconds, default 60) bounds the wait.
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 SCRATCH [TARBALL]" >&2
  exit 2
fi
repo=$(cd "$(dirname "$0")/../.." && pwd)
tarball=${2:-$repo/scratch/docker-engine/docker-engine.tar.xz}
mkdir -p "$1"
scratch=$(cd "$1" && pwd)
engine=$scratch/engine
sock=$scratch/docker.sock
host=unix://$sock
timeout=${DOCKER_UP_TIMEOUT:-60}
if [ ${#sock} -gt 107 ]; then
  echo "socket path too long (${#sock} bytes > 107): $sock; use a shorter SCRATCH" >&2
  exit 2
fi

server_line() {
  DOCKER_HOST=$host "$engine/bin/docker" info --format \
    '# Docker Engine {{.ServerVersion}}, storage {{.Driver}}, cgroup v{{.CgroupVersion}} ({{.CgroupDriver}}), runtimes:{{range $k, $v := .Runtimes}} {{$k}}{{end}}' \
    2>/dev/null
}
print_lines() {
  echo "export DOCKER_HOST=$host"
  echo "export PATH=$engine/bin:\$PATH"
  echo "$1"
}
answers() {
  [ -S "$sock" ] && [ -x "$engine/bin/docker" ] \
    && DOCKER_HOST=$host timeout 10 "$engine/bin/docker" version --format '{{.Server.Version}}' >/dev/null 2>&1
}
dockerd_pid() {
  local pid
  [ -f "$scratch/dockerd.pid" ] || return 1
  pid=$(cat "$scratch/dockerd.pid")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

if answers; then
  print_lines "$(server_line) (already running)"
  exit 0
fi

t0=$(date +%s.%N)
if ! pid=$(dockerd_pid); then
  # Not running: (re)unpack when the tarball differs from what SCRATCH/engine holds.
  if [ ! -f "$tarball" ]; then
    echo "no engine tarball at $tarball (make it with scripts/gpu/fetch-docker-packages.sh and carry it)" >&2
    exit 2
  fi
  sum=$(sha256sum "$tarball" | cut -d' ' -f1)
  if [ -f "$tarball.sha256" ] && [ "$(cut -d' ' -f1 "$tarball.sha256")" != "$sum" ]; then
    echo "sha256 mismatch: $tarball is $sum, $tarball.sha256 says $(cut -d' ' -f1 "$tarball.sha256")" >&2
    exit 1
  fi
  if [ "$(cat "$engine/.tarball-sha256" 2>/dev/null)" != "$sum" ]; then
    rm -rf "$engine" "$engine.part"
    mkdir -p "$engine.part"
    tar -xJf "$tarball" -C "$engine.part" --strip-components=1
    echo "$sum" >"$engine.part/.tarball-sha256"
    mv "$engine.part" "$engine"
  fi
  missing=$(for b in "$engine"/bin/*; do
              LD_LIBRARY_PATH=$engine/lib ldd "$b" 2>/dev/null | grep 'not found' | sed "s|^|$(basename "$b"): |"
            done || true)
  if [ -n "$missing" ]; then
    echo "shared libraries missing on this machine (add their Debian packages with" >&2
    echo "DOCKER_EXTRA_PACKAGES=... scripts/gpu/fetch-docker-packages.sh):" >&2
    echo "$missing" >&2
    exit 3
  fi
  mkdir -p "$scratch/data" "$scratch/exec"
  rm -f "$sock"
  # Its own environment: the caller's LD_LIBRARY_PATH (CUDA, the driver) stays out of the engine.
  env PATH="$engine/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
      LD_LIBRARY_PATH="$engine/lib" \
    setsid "$engine/bin/dockerd" --data-root "$scratch/data" --exec-root "$scratch/exec" \
      --pidfile "$scratch/dockerd.pid" --iptables=false --bridge=none -H "$host" \
      </dev/null >>"$scratch/dockerd.log" 2>&1 &
  started=$!
else
  started=$pid   # a dockerd from an earlier call is still starting: wait for it
fi

deadline=$(( $(date +%s) + timeout ))
until answers; do
  if ! kill -0 "$started" 2>/dev/null; then
    echo "dockerd exited before answering on $sock; end of $scratch/dockerd.log:" >&2
    tail -n 25 "$scratch/dockerd.log" >&2
    exit 1
  fi
  if [ "$(date +%s)" -ge "$deadline" ]; then
    echo "dockerd (pid $started) did not answer on $sock within ${timeout}s; end of $scratch/dockerd.log:" >&2
    tail -n 25 "$scratch/dockerd.log" >&2
    exit 1
  fi
  sleep 0.2
done
elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
print_lines "$(server_line), up in ${elapsed} s"
