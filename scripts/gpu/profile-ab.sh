#!/usr/bin/env bash
# An A/B of benchmarks/audit_profile.py on the GPU machine, in one device call: the working
# tree ("new") against an older commit ("old", its src/ from `git archive -o OLD.tgz COMMIT src`,
# carried), in the order given, each run from its own source tree, host runtime. Every run keeps
# its printed profile, its JSON, its cached run's lines and both timelines. Carry
# scratch/gpu-wheels and OLD.tgz. State outside the repository copy goes to SCRATCH (default
# /root/ea). Long A/Bs outlive one device command when started with setsid; the last step
# bundles everything into SCRATCH/NAME.tgz for a later command to copy to its $OUT.
#   scripts/gpu/profile-ab.sh NAME OLD.tgz SUITE new1 old2 old3 new4 ...
#     -> SCRATCH/NAME/NAME-<suite>-<run>{.txt,.json,-cached.jsonl,-timeline-{cold,cached}.jsonl},
#        SCRATCH/NAME/NAME-output.txt, then SCRATCH/NAME.tgz
# More trees: TREES="mid=MID.tgz ..." runs the runs named mid1, mid2, ... from MID.tgz's src.
# PROFILE_ARGS (say "--solution A --solution B") goes to every audit_profile.py run, and
# EXTRA_PATH (folders of libraries installed with pip --target) after each tree on PYTHONPATH.
# Where nvidia-smi finds no GPU, the audits run on the CPU (a trial of the script itself).
set -u
name=$1 old_tgz=$2 suite=$3
shift 3
source "$(dirname "$0")/harness-env.sh"
res=$scratch/$name
declare -A trees=([new]=$PWD)
for pair in "old=$old_tgz" ${TREES:-}; do
  label=${pair%%=*} dir=$scratch/$label-$name
  mkdir -p "$dir"
  tar xzf "${pair#*=}" -C "$dir"
  trees[$label]=$dir
done
mkdir -p "$res"
{
  nvidia-smi --query-gpu=name,uuid,driver_version,clocks.sm,power.limit --format=csv || true
  for run in "$@"; do
    echo "== $run $(date +%T)"
    tree=${trees[${run%%[0-9]*}]}
    base=$res/$name-$suite-$run
    PYTHONPATH=$tree/src:$scratch/pylib${EXTRA_PATH:+:$EXTRA_PATH} python3 benchmarks/audit_profile.py \
      ${uuid:+--gpu "$uuid"} --out "$scratch/p-$name-$run" --suite "$suite" --json "$base.json" \
      ${PROFILE_ARGS:-} >"$base.txt" 2>&1
    cp "$scratch/p-$name-$run/results.cached.jsonl" "$base-cached.jsonl"
    for kind in cold cached; do
      cp "$scratch/p-$name-$run.timeline.$kind.jsonl" "$base-timeline-$kind.jsonl"
    done
    grep -E "total \(command\)|^cached:|lines after their job" "$base.txt"
  done
  echo "== done $(date +%T)"
} >"$res/$name-output.txt" 2>&1
sed -i -e "s|$scratch/p-$name-|<out>-|g" -e "s|$scratch|<scratch>|g" "$res"/*.txt
tar czf "$scratch/$name.tgz" -C "$scratch" "$name"
