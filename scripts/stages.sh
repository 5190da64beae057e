# Sourced by .ci/run and scripts/test: `stage NAME COMMAND...` runs one stage and records its time; the table of every
# stage run so far is printed when the shell exits, with the stage that failed marked, and in CI_STAGES_FILE when set,
# followed by the summary line of every test run the stages made (CTest's "N% tests passed ... out of M"), so the end
# of the log says how many tests ran, not only how long. A stage that fails ends the run (set -e).
_stage_rows=()
_stage_started=$(date +%s)
_stage_results=$(mktemp)

stage() {
  local name=$1 start rc=0
  shift
  start=$(date +%s)
  echo "=== stage: $name" >&2
  # Both streams pass through as they were; CTest's summary lines are kept aside for the end.
  "$@" > >(tee >(grep -E '^[0-9]+% tests passed' >>"$_stage_results" || true)) || rc=$?
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
    if [ -s "$_stage_results" ]; then
      echo
      echo "test runs: $(wc -l <"$_stage_results"), tests $(awk '{n += $NF} END {print n}' "$_stage_results"), failed $(awk '{f += $4} END {print f}' "$_stage_results")"
      cat "$_stage_results"
    fi
  } | tee ${CI_STAGES_FILE:+"$CI_STAGES_FILE"} >&2
  rm -f "$_stage_results"
}
trap _stage_table EXIT
