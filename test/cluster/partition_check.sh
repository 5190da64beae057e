#!/usr/bin/env bash
# A network partition, not a kill (run inside with_cluster.sh 2): 4 ranks, 2 per node, run checked collectives (the
# soak) until every packet between the two nodes is dropped (iptables DROP, both ways, on both nodes). Nothing closes
# a connection, so only the heartbeats can tell: every rank must fail with PeerLostError naming a rank of the other
# node within 2 s of the heartbeat timeout, and no rank may be left running.
#   usage: partition_check.sh HIERCOLL_LAUNCH MP_WORKER
set -uo pipefail
launch=$1 worker=$2
heartbeat_ms=2000
dir=$(mktemp -d)
rules() {  # rules -A|-D: the partition, on both nodes
  for n in 0 1; do
    ip netns exec hc$n iptables-legacy "$1" INPUT -i hcnic0 -j DROP 2>/dev/null
    ip netns exec hc$n iptables-legacy "$1" OUTPUT -o hcnic0 -j DROP 2>/dev/null
  done
}
trap 'rules -D; pkill -KILL -f "hiercoll-partition-$$" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/out"; exit 1; }

# A collective timeout far past the heartbeat timeout: the heartbeats, not a collective's deadline, must end it.
"$launch" -n 4 --ranks-per-node 2 --netns hc --tcp-store --keep-going --timeout 120 \
  -x HIERCOLL_FABRIC_PROVIDER=tcp -x HIERCOLL_TIMEOUT_MS=60000 -x HIERCOLL_HEARTBEAT_TIMEOUT_MS=$heartbeat_ms \
  -x HIERCOLL_SOAK_ITERATIONS=100000000 -x HIERCOLL_TEST_BACKTRACE=1 -- bash -c "exec -a hiercoll-partition-$$ $worker soak" >"$dir/out" 2>&1 &
launcher=$!
# Running, and past start-up: every rank has made its communicator and is in the soak's collectives.
sleep 3
kill -0 "$launcher" 2>/dev/null || fail "the job ended before the partition"
t0=$(date +%s%3N)
rules -A
wait "$launcher"
ended=$(date +%s%3N)
echo "partition at t0; launcher ended after $((ended - t0)) ms (heartbeat timeout $heartbeat_ms ms)"
grep "^LOST rank" "$dir/out" | sort
left=$(pgrep -f "hiercoll-partition-$$" | wc -l)
[ "$left" = 0 ] || fail "$left rank(s) still running after the launcher ended"
failed=0
for rank in 0 1 2 3; do
  line=$(grep "^LOST rank $rank " "$dir/out" | head -1)
  if [ -z "$line" ]; then echo "FAIL: rank $rank did not fail with PeerLostError"; failed=1; continue; fi
  peer=$(awk '{print $5}' <<<"$line")
  at=$(awk '{print $8}' <<<"$line")
  # Ranks 0 and 1 are node 0 (hc0), 2 and 3 node 1: the peer named must be across the partition.
  if (( (rank < 2) == (peer < 2) )); then echo "FAIL: rank $rank named rank $peer, on its own side"; failed=1; fi
  if (( at - t0 > heartbeat_ms + 2000 )); then
    echo "FAIL: rank $rank failed $((at - t0)) ms after the partition, past heartbeat timeout + 2 s"; failed=1
  fi
  echo "rank $rank: lost rank $peer after $((at - t0)) ms"
done
grep -q "mismatches" "$dir/out" && grep -E "^soak: [1-9]" "$dir/out" && { echo "FAIL: wrong elements"; failed=1; }
[ "$failed" = 0 ] || { cat "$dir/out"; exit 1; }
