#!/usr/bin/env bash
# Runs COMMAND with the emulated cluster (scripts/emulation/cluster) up, NODES nodes, and takes it down afterwards.
# CLUSTER_RATE and CLUSTER_DELAY, if set, shape its links (scripts/emulation/cluster's RATE and DELAY); CLUSTER_RAILS gives
# each node that many NICs, CLUSTER_DECOY=1 adds the decoy interface (scripts/emulation/cluster's --rails and --decoy).
# Exits 77 (CTest's SKIP_RETURN_CODE) where network namespaces cannot be made (not root, no iproute2).
#   usage: with_cluster.sh NODES COMMAND...
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
nodes=$1
shift
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
  echo "with_cluster: needs root, ip and unshare for network namespaces; skipped"
  exit 77
fi
"$root/scripts/emulation/cluster" up "$nodes" ${CLUSTER_RATE:-} ${CLUSTER_DELAY:-} --rails "${CLUSTER_RAILS:-1}" \
  $( ((${CLUSTER_DECOY:-0})) && echo --decoy) || exit 77
trap '"$root/scripts/emulation/cluster" down' EXIT
"$@"
