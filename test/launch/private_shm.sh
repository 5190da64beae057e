#!/usr/bin/env bash
# Two ranks of one host name and one boot, as containers started with one --hostname on one machine, the second with
# a /dev/shm of its own (docker's default without --ipc=host; here a mount namespace with a tmpfs there). Neither can
# attach the other's segments: they must be two nodes, and every collective must match the serial reference over the
# fabric. Exits 77 (skipped) without root or unshare.
#   usage: private_shm.sh HIERCOLL_LAUNCH HIERCOLL_MP_WORKER
set -uo pipefail
launch=$1 worker=$2
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then echo "private_shm: needs root and unshare; skipped"; exit 77; fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo HIERCOLL_TIMEOUT_MS=60000 "$launch" -n 2 --timeout 120 -- bash -c "
  if [ \$HIERCOLL_RANK = 1 ]; then
    exec unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /dev/shm && exec $worker scale'
  fi
  exec $worker scale" >"$out" 2>&1
status=$?
cat "$out"
[ "$status" = 0 ] || { echo "FAIL: the job failed (status $status)"; exit 1; }
grep -q "scale: 2 ranks on 2 nodes, every collective matched the serial reference" "$out" ||
  { echo "FAIL: the ranks were not two nodes, or a collective did not match"; exit 1; }
