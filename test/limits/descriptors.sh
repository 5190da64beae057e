#!/usr/bin/env bash
# A communicator raises the open-file limit (RLIMIT_NOFILE) to its hard limit, and where even that is too few for
# rank 0 (a store and a peer-watch connection per rank), creation fails at once with an error naming the limit.
#   usage: descriptors.sh HIERCOLL_LAUNCH MP_WORKER
set -uo pipefail
launch=$1 worker=$2
fail() { echo "FAIL: $*"; exit 1; }
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || (( hard >= 1024 )) || { echo "hard limit $hard: too low to test raising"; exit 77; }
run() {  # SOFT HARD: 2 ranks with those limits, their output in $out, their status in $status
  out=$( (ulimit -Sn "$1"; ulimit -Hn "$2" 2>/dev/null; ulimit -Sn "$1"
          exec "$launch" -n 2 --timeout 60 -x HIERCOLL_FABRIC_PROVIDER=tcp -x HIERCOLL_FABRIC_IFACE=lo -- \
          "$worker" limits) 2>&1)
  status=$?
}

# Soft 128 under a hard limit of 1024: both ranks run with 1024.
run 128 1024
[ "$status" = 0 ] || { echo "$out"; fail "exit status $status"; }
for r in 0 1; do
  echo "$out" | grep -q "rank $r NOFILE soft 1024 hard 1024" || { echo "$out"; fail "rank $r's soft limit was not raised"; }
done
echo "soft 128, hard 1024: both ranks raised to 1024"

# Hard 200: rank 0 needs more, and says so at once (system error: exit 3 from the worker, launcher's status 3).
start=$(date +%s%N)
run 200 200
took=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$status" = 3 ] || { echo "$out"; fail "exit status $status, want rank 0's 3 (a system error)"; }
echo "$out" | grep -q "ERROR \[system error\]: .*RLIMIT_NOFILE) is 200" || { echo "$out"; fail "no error naming the limit"; }
(( took < 15000 )) || fail "took $took ms"
echo "hard 200: rank 0 refused in $took ms, naming RLIMIT_NOFILE"
