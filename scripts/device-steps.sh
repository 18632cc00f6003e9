# device-steps.sh - sourced (bash) by the GPU machine's step scripts (kernels-ab.sh, and through
# kern-device-steps.sh kern21-device.sh and kern22-device.sh): each step under `timeout` within what is left of the script's time budget,
# its output to a log under $OUT, one line for it in the summary. The caller sets OUT,
# summary (a file), start (date +%s) and budget (seconds) first.
# shellcheck shell=bash
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo "$(($(date +%s) - start))s"; }
# The time a step may take: its own cap, or what is left of the budget if less (at least 5 s).
left() {
  local rest=$((budget - ($(date +%s) - start)))
  [ "$rest" -lt "$1" ] && echo $((rest > 5 ? rest : 5)) || echo "$1"
}
# step LOG LABEL CAP COMMAND...: the command under timeout, its output to $OUT/LOG
step() {
  local log=$1 label=$2 cap
  cap=$(left "$3")
  shift 3
  echo "== $label (cap ${cap}s, at $(elapsed))"
  timeout "$cap" "$@" >"$OUT/$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && note "$label: TIMED OUT after ${cap}s ($(elapsed))" || note "$label: rc $rc ($(elapsed))"
  return $rc
}
