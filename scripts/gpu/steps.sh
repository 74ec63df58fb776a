# Sourced by the scripts/gpu/*.sh that time their steps: `step NAME COMMAND...` runs COMMAND with
# its output appended to $out/NAME.txt and appends "NAME rc=RC SECONDS s" to $steps (and stdout).
step() {
  local name=$1 t0 rc
  shift
  t0=$(date +%s.%N)
  "$@" >>"$out/$name.txt" 2>&1
  rc=$?
  echo "$name rc=$rc $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s" | tee -a "$steps"
  return $rc
}
