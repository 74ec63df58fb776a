#!/usr/bin/env bash
# Import this machine's own software stack (the GPU machine's: OS, CUDA toolkit, torch venv) as a
# base image for solution environments.
#   scripts/gpu/import-host-base.sh NAME [MANIFEST]
# Needs a running engine (DOCKER_HOST and PATH as printed by scripts/gpu/docker-up.sh).
# Writes MANIFEST (default ./<NAME with / and : as _>.manifest.txt): the OS release, the
# venv's Python, the venv's distributions (name==version, sorted) and the dpkg packages
# (name=version, sorted). Nothing machine-specific (host name, driver, dates) is in it, so two
# machines with the same software image give the same file. Its sha256 is printed and set as the
# image label envaudit.host-manifest-sha256. When NAME already exists with that label value the
# import is skipped (FORCE=1 imports anyway).
# The image is `tar -C / -c usr etc opt/torch lib lib64 bin sbin | docker import - NAME`, less
# the driver's files (usr/local/nvidia/* is left empty: mount the machine's own, read-only, at
# run time; a driver baked into an image would not match another machine's kernel module) and
# the files Docker provides per container (etc/hostname, etc/hosts, etc/resolv.conf).
# HOST_VENV (default /opt/torch/.venv) and HOST_BASE_PATHS (default "usr etc opt/torch lib
# lib64 bin sbin") change what is described and imported; HOST_BASE_EXCLUDES (tar patterns)
# leaves more out. The OS layer alone, as containers/bases/gpu-host-os.toml takes it (`envaudit
# base build gpu-host-os` is the recorded way; this is its by-hand twin):
#   HOST_VENV=none HOST_BASE_PATHS="usr etc lib lib64 bin sbin var/lib/dpkg" \
#   HOST_BASE_EXCLUDES="usr/local/* var/lib/dpkg/*-old" scripts/gpu/import-host-base.sh NAME
set -euo pipefail

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 NAME [MANIFEST]" >&2
  exit 2
fi
name=$1
manifest=${2:-$(echo "$name" | tr '/:' '__').manifest.txt}
venv=${HOST_VENV:-/opt/torch/.venv}
read -r -a wanted <<<"${HOST_BASE_PATHS:-usr etc opt/torch lib lib64 bin sbin}"
read -r -a excluded <<<"${HOST_BASE_EXCLUDES:-}"
label=envaudit.host-manifest-sha256
command -v docker >/dev/null || { echo "no docker on PATH: eval the output of scripts/gpu/docker-up.sh first" >&2; exit 2; }
docker version --format '{{.Server.Version}}' >/dev/null || { echo "the engine at ${DOCKER_HOST:-its default socket} does not answer" >&2; exit 1; }

{
  echo "# envaudit host base manifest"
  echo "## os"
  grep -E '^(ID|VERSION_ID|PRETTY_NAME)=' /etc/os-release | sort
  echo "## python ($venv)"
  if [ -x "$venv/bin/python" ]; then
    "$venv/bin/python" -c 'import sys; print(sys.version.split()[0])'
    echo "## distributions ($venv)"
    "$venv/bin/python" - <<'PY'
import importlib.metadata as md, re
seen = set()
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name:
        seen.add(f"{re.sub(r'[-_.]+', '-', name).lower()}=={dist.version}")
print("\n".join(sorted(seen)))
PY
  else
    echo "(no venv at $venv)"
  fi
  echo "## dpkg packages"
  if command -v dpkg-query >/dev/null; then
    dpkg-query -W -f '${db:Status-Abbrev} ${Package}:${Architecture}=${Version}\n' | awk '$1 == "ii" { print $2 }' | LC_ALL=C sort
  fi
} >"$manifest"
sum=$(sha256sum "$manifest" | cut -d' ' -f1)
echo "manifest $manifest sha256 $sum ($(grep -c '==' "$manifest") venv distributions, $(grep -c '^[^#].*:.*=' "$manifest") dpkg packages)"

paths=()
for p in "${wanted[@]}"; do
  if [ -e "/$p" ] || [ -L "/$p" ]; then paths+=("$p"); fi
done
joined=$(IFS=,; echo "${paths[*]}")
[ ${#excluded[@]} -gt 0 ] && joined="$joined;-$(IFS=,; echo "${excluded[*]}")"
if [ "${FORCE:-0}" != 1 ] && [ "$(docker image inspect --format \
     "{{index .Config.Labels \"$label\"}} {{index .Config.Labels \"envaudit.host-base-paths\"}}" \
     "$name" 2>/dev/null)" = "$sum $joined" ]; then
  echo "$name already holds this manifest and these paths: import skipped"
  docker image inspect --format '{{.Id}} {{.Size}}' "$name"
  exit 0
fi
t0=$(date +%s.%N)
set +o pipefail
tar -C / -cf - --numeric-owner --warning=no-file-changed --ignore-failed-read \
    --exclude='usr/local/nvidia/*' --exclude=etc/hostname --exclude=etc/hosts --exclude=etc/resolv.conf \
    "${excluded[@]/#/--exclude=}" "${paths[@]}" 2>"$manifest.tar.err" \
  | docker import -c "LABEL $label=$sum" -c "LABEL envaudit.host-base-paths=$joined" - "$name"
rcs=("${PIPESTATUS[@]}")
set -o pipefail
# tar exits 1 for files that changed while read (logs): the image is still whole.
if [ "${rcs[0]}" -gt 1 ] || [ "${rcs[1]}" -ne 0 ]; then
  echo "import failed: tar rc ${rcs[0]}, docker import rc ${rcs[1]}" >&2
  tail -n 20 "$manifest.tar.err" >&2
  exit 1
fi
[ -s "$manifest.tar.err" ] || rm -f "$manifest.tar.err"
elapsed=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "imported $name from /{$joined} in $elapsed s: $(docker image inspect --format '{{.Id}} {{.Size}}' "$name")"
