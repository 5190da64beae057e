#!/usr/bin/env bash
# Under PMIx, rank 0 never publishes 127.0.0.1 to a job that spans hosts: where its host has nothing but loopback up,
# every rank fails at once naming HIERCOLL_SOCKET_IFNAME, instead of the other hosts retrying 127.0.0.1 until the
# timeout. mpirun runs 2 ranks in a network namespace with only loopback; each is told it is alone on its host
# (OMPI_COMM_WORLD_LOCAL_SIZE=1 of 2, as mpirun says on two hosts). Root only (network namespaces): 77 elsewhere.
#   usage: pmix_loopback.sh MPIRUN MP_WORKER
set -uo pipefail
mpirun=$1 worker=$2
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "skipped: needs root for a network namespace"; exit 77; }
ns=hc-pmixlo-$$
ip netns add "$ns" || fail "ip netns add"
trap 'ip netns del "$ns" 2>/dev/null; rm -f /tmp/pmix_loopback.$$.out' EXIT
ip -n "$ns" link set lo up

start=$(date +%s%N)
# HIERCOLL_TIMEOUT_MS 60 s: an error that waited for the timeout would take a minute.
timeout 120 ip netns exec "$ns" "$mpirun" --allow-run-as-root --oversubscribe -np 2 -x HIERCOLL_TIMEOUT_MS=60000 \
  bash -c 'OMPI_COMM_WORLD_LOCAL_SIZE=1 exec "$0" hello' "$worker" >/tmp/pmix_loopback.$$.out 2>&1
status=$? took=$(( ($(date +%s%N) - start) / 1000000 ))
cat /tmp/pmix_loopback.$$.out
[ "$status" != 0 ] || fail "the job succeeded with rank 0 on loopback alone"
[ "$status" != 124 ] || fail "the job hung"
grep -q "rank 0 of 2" /tmp/pmix_loopback.$$.out && fail "a communicator was made"
# Rank 0 names the knob; rank 1 gets rank 0's error through PMIx (so both name it).
[ "$(grep -c 'HIERCOLL_SOCKET_IFNAME' /tmp/pmix_loopback.$$.out)" -ge 2 ] || fail "not both ranks name HIERCOLL_SOCKET_IFNAME"
grep -q "rank 0 failed" /tmp/pmix_loopback.$$.out || fail "rank 1 did not get rank 0's error"
(( took < 20000 )) || fail "took $took ms (the timeout is 60 s)"
echo "both ranks failed in $took ms, naming HIERCOLL_SOCKET_IFNAME"
