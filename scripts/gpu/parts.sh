# Sourced by the GPU scripts whose inputs come over several device calls (record-audit.sh,
# overlay-audit.sh): the waits of a driver that outlives the call that started it.
# wait_for_file FILE SECONDS: until FILE exists, checked every second; 1 if it never does.
wait_for_file() {
  for _ in $(seq "$2"); do
    [ -e "$1" ] && return 0
    sleep 1
  done
  [ -e "$1" ]
}
# wait_for_parts FOLDER COUNT: until FOLDER holds COUNT part-* files (30 min at most); 1 if not.
wait_for_parts() {
  for _ in $(seq 900); do
    [ "$(ls "$1"/part-* 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    sleep 2
  done
  return 1
}
# join_engine FOLDER COUNT TARBALL: once FOLDER holds the engine's COUNT parts, joins them into
# TARBALL with its docker-engine.tar.xz.sha256 beside it (scripts/gpu/docker-up.sh checks it).
join_engine() {
  wait_for_parts "$1" "$2" || return 1
  cat "$1"/part-* >"$3" && cp "$1/docker-engine.tar.xz.sha256" "$3.sha256"
}
