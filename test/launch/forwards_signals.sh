#!/usr/bin/env bash
# hiercoll_launch ends what it started, as mpirun does: SIGTERM, SIGINT and SIGHUP to it reach every rank (SIGKILL
# follows for a rank that ignores them), and a launcher killed outright takes its ranks with it.
#   usage: forwards_signals.sh HIERCOLL_LAUNCH
set -uo pipefail
launch=$1
dir=$(mktemp -d)
trap 'pkill -KILL -f "hiercoll-signals-$$" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Job control: a background job of a shell without it starts with SIGINT ignored, which the launcher respects.
set -m

# start TRAP: 3 ranks that write their pid and sleep (each a bash whose child is the sleep: what a rank started must
# end too); TRAP is bash code run first (trap '' TERM: a rank that ignores SIGTERM). Waits until all three have
# written their pid.
start() {
  rm -f "$dir"/pid.*
  "$launch" -n 3 --timeout 300 -- bash -c "${1:-:}; echo \$\$ > $dir/pid.\$HIERCOLL_RANK; sleep 600 # hiercoll-signals-$$" \
    >"$dir/out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do [ "$(ls "$dir" | grep -c '^pid\.')" = 3 ] && return; sleep 0.1; done
  fail "the ranks did not start"
}
# gone WITHIN_MS: every rank and every sleep of this test ended within WITHIN_MS.
gone() {
  local t0=$(date +%s%N)
  while (( ($(date +%s%N) - t0) / 1000000 < $1 )); do
    alive=0
    # A killed rank whose launcher is gone waits as a zombie until init reaps it: that counts as ended.
    for f in "$dir"/pid.*; do [[ "$(cut -d' ' -f3 "/proc/$(cat "$f")/stat" 2>/dev/null)" =~ ^[RSDT]$ ]] && alive=1; done
    for p in $(pgrep -f "hiercoll-signals-$$"); do
      [[ "$(cut -d' ' -f3 "/proc/$p/stat" 2>/dev/null)" =~ ^[RSDT]$ ]] && alive=1
    done
    ((alive)) || { echo $(( ($(date +%s%N) - t0) / 1000000 )); return 0; }
    sleep 0.05
  done
  return 1
}

for sig in TERM INT HUP; do
  start ""
  kill -"$sig" "$launcher"
  took=$(gone 2000) || fail "SIG$sig: ranks still running 2 s after the launcher got it"
  wait "$launcher"; status=$?
  want=$((128 + $(kill -l "$sig")))
  [ "$status" = "$want" ] || fail "SIG$sig: launcher exit status $status, want $want"
  echo "SIG$sig to the launcher ended its 3 ranks in $took ms (status $status)"
done

# A rank that ignores SIGTERM: SIGKILL after the grace (3 s).
start "trap '' TERM"
kill -TERM "$launcher"
took=$(gone 6000) || fail "a rank ignoring SIGTERM still runs 6 s later"
wait "$launcher"
echo "ranks ignoring SIGTERM were killed $took ms after it"

# A second signal does not wait for the grace.
start "trap '' TERM"
kill -TERM "$launcher"; sleep 0.3; kill -TERM "$launcher"
took=$(gone 1500) || fail "a second SIGTERM did not kill the ranks at once"
wait "$launcher"
echo "a second SIGTERM killed them $took ms after it"

# The launcher killed outright (SIGKILL: nothing to forward): its ranks die with it.
start ""
disown "$launcher"  # no "Killed" notice from this shell
kill -KILL "$launcher"
took=$(gone 2000) || fail "ranks outlived a killed launcher by 2 s"
echo "a killed launcher took its ranks with it in $took ms"
