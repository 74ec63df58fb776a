#!/usr/bin/env bash
# A single-node Slurm on this machine, for the slurm executor's tests and for trying it out:
# munge, slurmctld and slurmd as root, one partition `debug` holding this node with all its
# CPUs (and its GPUs, as gres, when nvidia-smi lists any). Needs slurm-wlm and munge (Debian's
# packages). Idempotent: does nothing when `sinfo` already answers.
#   scripts/slurm/single-node.sh            start it
#   scripts/slurm/single-node.sh stop       stop it
set -euo pipefail
conf_dir=/etc/slurm
node=$(hostname -s)
if [ "${1:-}" = stop ]; then
    pkill -x slurmd || true
    pkill -x slurmctld || true
    pkill -x munged || true
    exit 0
fi
if sinfo -h >/dev/null 2>&1; then
    exit 0
fi
for tool in slurmctld slurmd munged sbatch; do
    command -v "$tool" >/dev/null || { echo "missing $tool: apt-get install slurm-wlm munge" >&2; exit 2; }
done
mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge /etc/munge
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown -R munge:munge /etc/munge /run/munge 2>/dev/null || true
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
# munged as root needs --force; a dead one's zombie or stale socket does not count as running
munge -n >/dev/null 2>&1 || munged --force 2>/dev/null
munge -n >/dev/null 2>&1 || { echo "munged did not start" >&2; exit 2; }
memory=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
gres=""
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${gpus:-0}" -gt 0 ]; then
    gres="Gres=gpu:$gpus"
    : >"$conf_dir/gres.conf"
    for ((i = 0; i < gpus; i++)); do echo "Name=gpu File=/dev/nvidia$i" >>"$conf_dir/gres.conf"; done
fi
cat >"$conf_dir/slurm.conf" <<CONF
ClusterName=envaudit
SlurmctldHost=$node
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MinJobAge=3600
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
${gres:+GresTypes=gpu}
NodeName=$node CPUs=$(nproc) RealMemory=$memory $gres State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld
slurmd
for _ in $(seq 30); do
    sinfo -h -o '%t' 2>/dev/null | grep -qE 'idle|mix|alloc' && exit 0
    sleep 1
done
echo "slurm did not come up; see /var/log/slurm/" >&2
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 2
