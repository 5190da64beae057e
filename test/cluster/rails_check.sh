#!/usr/bin/env bash
# Rails on the emulated cluster (with_cluster.sh, CLUSTER_RAILS NICs per node and the decoy dock0 first):
#   1. 2 nodes x 2 ranks, then 2 nodes x 1 rank, no interface named: every rank's NICs are rail-aligned, the node's
#      ranks use every NIC of it (mp_worker rails checks that from Communicator::fabric_nic: with more NICs than
#      ranks each rank stripes over its share), the 64 MB allreduce is right, and each NIC of a node carried an even
#      share of its bytes, within 10 % (the NICs' tx counters, around the run; without the start-up link probe,
#      whose 8 MB only rank 0's NIC sends);
#   2. the decoy chosen on both nodes (HIERCOLL_FABRIC_IFACE==dock0): start-up fails at once, well before the
#      communicator's timeout, instead of waiting in the init barrier for it.
#   usage: rails_check.sh LAUNCH WORKER
set -euo pipefail
launch=$1
worker=$2
rails=${CLUSTER_RAILS:?rails_check.sh: set CLUSTER_RAILS}
tx() { ip netns exec "hc$1" cat "/sys/class/net/hcnic$2/statistics/tx_bytes"; }
status=0
for per_node in 2 1; do
  declare -A before
  for n in 0 1; do for ((r = 0; r < rails; r++)); do before[$n.$r]=$(tx $n $r); done; done
  echo "== 2 nodes x $per_node rank(s), $rails NICs each"
  "$launch" -n $((2 * per_node)) --ranks-per-node $per_node --netns hc --tcp-store --timeout 240 \
    -x HIERCOLL_TIMEOUT_MS=120000 -x HIERCOLL_ALGO=hier -x HIERCOLL_NET_PROBE_BYTES=0 -- "$worker" rails "$rails" ||
    status=1
  for n in 0 1; do
    sent=()
    total=0
    for ((r = 0; r < rails; r++)); do
      sent[r]=$(($(tx $n $r) - ${before[$n.$r]}))
      total=$((total + sent[r]))
    done
    for ((r = 0; r < rails; r++)); do
      share=$((100 * sent[r] * rails / total))
      echo "node $n hcnic$r: ${sent[r]} bytes, ${share}% of an even share"
      ((share >= 90 && share <= 110)) || { echo "node $n: hcnic$r carried ${share}% of an even share"; status=1; }
    done
  done
done
start=$(date +%s)
if "$launch" -n 4 --ranks-per-node 2 --netns hc --timeout 100 -x HIERCOLL_TIMEOUT_MS=60000 \
  -x HIERCOLL_FABRIC_IFACE==dock0 -- "$worker" hello; then
  echo "ranks on the decoy interface started"
  status=1
fi
took=$(($(date +%s) - start))
echo "the decoy's failure took ${took} s (communicator timeout 60 s)"
((took < 20)) || status=1
exit $status
