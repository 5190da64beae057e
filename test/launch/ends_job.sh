#!/usr/bin/env bash
# hiercoll_launch ends the job when one rank fails, as mpirun and torchrun do, and exits with that rank's status.
#   usage: ends_job.sh HIERCOLL_LAUNCH MP_WORKER
set -uo pipefail
launch=$1 worker=$2
fail() { echo "FAIL: $*"; exit 1; }

# 1. Rank 1 exits with 7; ranks 0 and 2 would sleep for ten minutes: they are ended within the grace (3 s) + SIGTERM.
start=$(date +%s%N)
"$launch" -n 3 --timeout 120 -- bash -c '[ "$HIERCOLL_RANK" = 1 ] && exit 7; exec sleep 600' 2>/tmp/ends_job.$$.err
status=$? took=$(( ($(date +%s%N) - start) / 1000000 ))
cat /tmp/ends_job.$$.err
[ "$status" = 7 ] || fail "exit status $status, want rank 1's 7"
grep -q "rank 1 failed first" /tmp/ends_job.$$.err || fail "the first failure is not named"
grep -q "were ended" /tmp/ends_job.$$.err || fail "the sleeping ranks were not ended"
(( took < 15000 )) || fail "took $took ms"
echo "exit 7 ended the job in $took ms"

# 2. A rank killed in an allreduce with the default timeout (30 min): the others name it at once and exit, and the
#    job's status is the kill's (128 + 9).
start=$(date +%s%N)
"$launch" -n 3 --timeout 120 -x HIERCOLL_FABRIC_PROVIDER=tcp -x HIERCOLL_FABRIC_IFACE=lo \
  -x HIERCOLL_TEST_VICTIM=0 -x HIERCOLL_TEST_DIE_ITER=2 -x HIERCOLL_TEST_DIE_AFTER_US=1000 -x HIERCOLL_TEST_HOW=kill \
  -x HIERCOLL_TEST_COUNT=1000000 -- "$worker" die-timed >/tmp/ends_job.$$.out 2>&1
status=$? took=$(( ($(date +%s%N) - start) / 1000000 ))
tail -5 /tmp/ends_job.$$.out
[ "$status" = 137 ] || fail "exit status $status, want 137 (rank 0's SIGKILL)"
[ "$(grep -c 'NOTICED_AT.*rank 0' /tmp/ends_job.$$.out)" = 2 ] || fail "not both survivors named rank 0"
(( took < 15000 )) || fail "took $took ms"
echo "a killed rank 0 ended the job in $took ms"
rm -f /tmp/ends_job.$$.*
