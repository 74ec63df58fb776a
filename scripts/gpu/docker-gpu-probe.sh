#!/usr/bin/env bash
# On the GPU machine: what the driver exposes, then the engine up, the host base imported, and
# GPU containers run under the harness's restrictions, every step timed.
#   scripts/gpu/docker-gpu-probe.sh OUTDIR [SCRATCH]
# Needs the engine tarball of scripts/gpu/fetch-docker-packages.sh at its default place
# (carry scratch/docker-engine). SCRATCH (default: the first of /root/ead, /var/tmp/ead, /tmp/ead
# on a file system other than overlayfs/tmpfs) holds the engine, its data and its socket.
# Writes OUTDIR/probe.txt (findings and every command's output), OUTDIR/times.tsv (step, rc,
# seconds), OUTDIR/docker-info.txt, OUTDIR/dockerd.log and OUTDIR/host-base.manifest.txt.
# Each step's failure is recorded and the probe goes on; the exit status is 0.
set -u
out=$(mkdir -p "$1" && cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
log=$out/probe.txt
times=$out/times.tsv
: >"$log"
printf 'step\trc\tseconds\n' >"$times"
image=envaudit-host-base:probe

section() { printf '\n===== %s\n' "$*" >>"$log"; }
# step NAME CMD...: run CMD with its output in the log, its time and exit status in times.tsv.
step() {
  local name=$1 t0 rc
  shift
  section "$name: $*"
  t0=$(date +%s.%N)
  "$@" >>"$log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')" >>"$times"
  echo "[$name rc=$rc]" >>"$log"
  return $rc
}
show() { section "$*"; bash -c "$*" >>"$log" 2>&1; }

show 'uname -a; grep PRETTY_NAME /etc/os-release; nproc; free -g | head -2'
show 'df -hT / /tmp /root /var/tmp /dev/shm 2>/dev/null'
show 'ls -la /dev/nvidia* /dev/nvidia-caps 2>&1; ls -la /dev/dri 2>&1'
show 'nvidia-smi -L; nvidia-smi --query-gpu=index,uuid,pci.bus_id,driver_version --format=csv'
show 'nvidia-smi -q | grep -E "^GPU |GPU UUID|Minor Number|Bus Id|Driver Version|CUDA Version|Persistence|Compute Mode|MIG Mode" -A0'
show 'for f in /proc/driver/nvidia/gpus/*/information; do echo "$f"; cat "$f"; done; cat /proc/driver/nvidia/version'
show 'for u in $(nvidia-smi --query-gpu=uuid --format=csv,noheader); do echo "$u -> /dev/nvidia$(nvidia-smi -q -i "$u" | awk -F": " "/Minor Number/ {print \$2}")"; done'
show 'ldconfig -p | grep -E "libcuda|libnvidia-ml|libnvidia-ptxjitcompiler"'
show 'ls -la /usr/local/nvidia /usr/local/nvidia/lib64 2>&1 | head -60; ls /usr/local/nvidia/bin 2>&1; du -sh /usr/local/nvidia'
show 'grep -E "nvidia|cuda| / |/opt|/usr" /proc/mounts'
show 'ls -la /usr/local/cuda 2>&1 | head -3; readlink -f /usr/local/cuda'
show 'env | grep -E "^(NVIDIA|CUDA|LD_LIBRARY_PATH|PATH|LIBRARY_PATH|NCCL|TORCH|TRITON|PYTHON|HOME|VIRTUAL_ENV)" | sort'
show 'ls -la /etc/cdi /var/run/cdi 2>&1; command -v nvidia-container-runtime nvidia-ctk nvidia-container-cli docker podman 2>&1'
show 'stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.controllers /sys/fs/cgroup/cgroup.subtree_control; cat /proc/self/cgroup; grep -E "overlay|tmpfs" /proc/filesystems'
show 'ls -ld / /opt/torch /opt/torch/.venv /usr/local/nvidia; /opt/torch/.venv/bin/python -V; ls -la /opt/torch/.venv/bin/python*'

scratch=${2:-}
if [ -z "$scratch" ]; then
  for d in /root/ead /var/tmp/ead /tmp/ead; do
    mkdir -p "$d"
    case $(stat -fc %T "$d") in overlayfs|tmpfs) continue ;; esac
    scratch=$d
    break
  done
  scratch=${scratch:-/root/ead}
fi
section "SCRATCH=$scratch ($(stat -fc %T "$scratch" 2>/dev/null))"

step docker-up bash -c "'$repo/scripts/gpu/docker-up.sh' '$scratch' >'$out/up.env'"
cat "$out/up.env" >>"$log"
# shellcheck disable=SC1091
. "$out/up.env"
step docker-up-again "$repo/scripts/gpu/docker-up.sh" "$scratch"
show "ldd '$scratch/engine/bin/dockerd' '$scratch/engine/bin/runc'"
docker info >"$out/docker-info.txt" 2>&1
show "grep -E 'Storage Driver|Backing Filesystem|Cgroup|Runtimes|Default Runtime|Kernel Version|Security Options|CDI|Docker Root Dir' -A1 '$out/docker-info.txt'"

(cd "$out" && step import-host-base "$repo/scripts/gpu/import-host-base.sh" "$image" host-base.manifest.txt)
(cd "$out" && step import-host-base-again "$repo/scripts/gpu/import-host-base.sh" "$image" host-base.manifest.txt)
show "docker image ls; docker image inspect --format '{{json .Config.Labels}}' $image; df -h '$scratch'; du -sh '$scratch/data'"
show "head -40 '$out/host-base.manifest.txt'; grep -cE '==' '$out/host-base.manifest.txt'"

uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
minor=$(nvidia-smi -q -i "$uuid" | awk -F': ' '/Minor Number/ {print $2; exit}')
section "GPU $uuid -> /dev/nvidia$minor"
gpu=(--device "/dev/nvidia$minor" --device /dev/nvidiactl --device /dev/nvidia-uvm
     -v /usr/local/nvidia:/usr/local/nvidia:ro -e LD_LIBRARY_PATH=/usr/local/nvidia/lib64
     -e PATH=/opt/torch/.venv/bin:/usr/bin:/bin)
strict=(--rm --pull never --network none --read-only --tmpfs /tmp --user 10001:10001)
smoke=$(cat "$repo/scripts/gpu/container_smoke.py")

step run-true docker run --rm --pull never --network none "$image" /bin/true
step run-strict-c docker run "${strict[@]}" "${gpu[@]}" "$image" python3 -c "$smoke"
step run-strict-mounted docker run "${strict[@]}" "${gpu[@]}" \
  -v "$repo/scripts/gpu:/harness:ro" -v "$repo/src:/harness-src:ro" -e ENVAUDIT_SRC=/harness-src \
  "$image" python3 /harness/container_smoke.py
step run-strict-mounted-capdrop docker run "${strict[@]}" "${gpu[@]}" --cap-drop ALL \
  --security-opt no-new-privileges --pids-limit 4096 --ipc private -e HOME=/tmp \
  -v "$repo/scripts/gpu:/harness:ro" -v "$repo/src:/harness-src:ro" -e ENVAUDIT_SRC=/harness-src \
  "$image" python3 /harness/container_smoke.py
step run-nvidia-smi docker run "${strict[@]}" "${gpu[@]}" -e PATH=/usr/local/nvidia/bin:/usr/bin:/bin \
  "$image" nvidia-smi -L
step run-no-uvm docker run "${strict[@]}" --device "/dev/nvidia$minor" --device /dev/nvidiactl \
  -v /usr/local/nvidia:/usr/local/nvidia:ro -e LD_LIBRARY_PATH=/usr/local/nvidia/lib64 \
  -e PATH=/opt/torch/.venv/bin:/usr/bin:/bin "$image" python3 -c "$smoke"
step run-no-driver-mount docker run "${strict[@]}" --device "/dev/nvidia$minor" --device /dev/nvidiactl \
  --device /dev/nvidia-uvm -e PATH=/opt/torch/.venv/bin:/usr/bin:/bin "$image" python3 -c "$smoke"
step run-gpus-flag docker run "${strict[@]}" --gpus all "$image" /bin/true

cp "$scratch/dockerd.log" "$out/dockerd.log" 2>/dev/null
rm -f "$out/up.env"
exit 0
