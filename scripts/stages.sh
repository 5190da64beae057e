# Sourced by .ci/run and scripts/test: `stage NAME COMMAND...` runs one stage and records its time; the table of every
# stage run so far is printed when the shell exits, with the stage that failed marked, and in CI_STAGES_FILE when set.
# A stage that fails ends the run (set -e), as before the table existed.
_stage_rows=()
_stage_started=$(date +%s)

stage() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  echo "=== stage: $name" >&2
  "$@" || rc=$?
  _stage_rows+=("$(printf '%-48s %6ss  %s' "$name" $(($(date +%s) - start)) "$([ $rc = 0 ] && echo ok || echo "FAILED ($rc)")")")
  return $rc
}

_stage_table() {
  ((${#_stage_rows[@]})) || return 0
  {
    echo
    printf '%-48s %7s  %s\n' "stage" "time" "result"
    printf '%s\n' "${_stage_rows[@]}"
    printf '%-48s %6ss  (%d min %d s)\n' "total" $(($(date +%s) - _stage_started)) \
      $((($(date +%s) - _stage_started) / 60)) $((($(date +%s) - _stage_started) % 60))
  } | tee ${CI_STAGES_FILE:+"$CI_STAGES_FILE"} >&2
}
trap _stage_table EXIT
