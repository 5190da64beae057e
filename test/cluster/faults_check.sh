#!/usr/bin/env bash
# Network faults under collectives on the emulated cluster (run inside with_cluster.sh 2): 4 ranks, 2 per node, run
# random collectives whose every element is checked (mp_worker soak), while
#   1. node 1's link goes down for 3 s in the middle (ip link set hcnic0 down / up);
#   2. 1 % of the packets each node sends are dropped (iptables statistic; this kernel has no netem).
# Under the outage each rank must either finish with every element right or fail with an error; under the loss every
# rank must finish right. A wrong element (the soak's exit 1) or a rank still running past the timeout fails the check.
# FAULTS_PROVIDER picks the libfabric provider (default tcp; udp is ofi_rxd, reliable datagrams in software, the EFA
# stand-in, whose retransmits must carry the lost packets).
#   usage: faults_check.sh HIERCOLL_LAUNCH MP_WORKER [ITERATIONS]   (scripts/emulation/fault-soak runs it long)
set -uo pipefail
launch=$1 worker=$2 iterations=${3:-1500}
log=$(mktemp)
trap 'rm -f "$log"; for n in 0 1; do ip netns exec hc$n iptables-legacy -D OUTPUT -o hcnic0 -m statistic --mode random \
  --probability 0.01 -j DROP 2>/dev/null; ip netns exec hc$n ip link set hcnic0 up 2>/dev/null; done' EXIT
failed=0

run() {  # run NAME: the soak, with whatever fault the caller set up; prints each rank's outcome
  local name=$1 start status
  start=$(date +%s%N)
  "$launch" -n 4 --ranks-per-node 2 --netns hc --tcp-store --keep-going --timeout 180 \
    -x HIERCOLL_FABRIC_PROVIDER="${FAULTS_PROVIDER:-tcp}" -x HIERCOLL_TIMEOUT_MS=30000 -x HIERCOLL_SOAK_ITERATIONS="$iterations" \
    -x HIERCOLL_TEST_BACKTRACE=1 \
    -- "$worker" soak >"$log" 2>&1
  status=$?
  local took=$(( ($(date +%s%N) - start) / 1000000 ))
  local ok errors wrong
  ok=$(grep -c "^soak: 0 mismatches" "$log")
  errors=$(grep -c "^ERROR \[" "$log")
  wrong=$(grep -cE "^soak: [1-9][0-9]* mismatches" "$log")
  echo "$name: $ok ranks correct, $errors failed with an error, $wrong with wrong elements, $took ms (launcher status $status)"
  grep -m3 "^ERROR \[" "$log"
  if [ -n "${min_ms:-}" ] && (( took < min_ms )); then
    echo "FAIL: $name: the run ended in $took ms, before the fault could reach it"; failed=1
  fi
  if [ -n "${must_finish:-}" ] && [ "$ok" != 4 ]; then
    echo "FAIL: $name: every rank must finish with every element right, $ok did"; failed=1
  fi
  if [ "$wrong" != 0 ] || [ "$status" = 124 ] || [ $((ok + errors)) != 4 ]; then
    echo "FAIL: $name"; tail -30 "$log"; failed=1
  fi
}

# 1. The link down for 3 s, 1 s into the run.
( sleep 1; ip netns exec hc1 ip link set hcnic0 down; sleep 3; ip netns exec hc1 ip link set hcnic0 up ) &
min_ms=4000 run "link down 3 s"  # a run that outlasts the outage, or the fault missed it
wait

# 2. 1 % loss on both nodes' links.
for n in 0 1; do
  ip netns exec hc$n iptables-legacy -A OUTPUT -o hcnic0 -m statistic --mode random --probability 0.01 -j DROP
done
# A provider that retransmits (udp's ofi_rxd; tcp) carries 1 % loss: every rank must finish right, no error.
must_finish=1 run "1 % packet loss"
exit $failed
