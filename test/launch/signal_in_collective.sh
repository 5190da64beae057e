#!/usr/bin/env bash
# A rank waiting in a collective ends at once, by the signal, when a launcher's SIGTERM reaches it (torchrun, Slurm
# and hiercoll_launch signal each rank) or when it crashes: no library handler in between (libinfinipath's, which
# libfabric's psm provider loads, turned SIGTERM into exit(1) under the rank's running threads), no backtrace file.
#   usage: signal_in_collective.sh HIERCOLL_LAUNCH HIERCOLL_MP_WORKER
set -uo pipefail
launch=$1 worker=$2
dir=$(mktemp -d)
trap 'pkill -KILL -f "hiercoll-sigcoll-$$" 2>/dev/null; rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; cat "$dir/out" 2>/dev/null; exit 1; }
running() { [[ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" =~ ^[RSDT]$ ]]; }

for sig in TERM SEGV ABRT; do
  rm -f "$dir"/pid.*
  # Rank 1 stops calling collectives after five allreduces; rank 0 waits in the sixth (timeout 60 s).
  HIERCOLL_TEST_HANG_RANK=1 HIERCOLL_TIMEOUT_MS=60000 HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo \
    "$launch" -n 2 --timeout 120 -- bash -c "echo \$\$ > $dir/pid.\$HIERCOLL_RANK; cd $dir; ulimit -c 0;
      exec -a hiercoll-sigcoll-$$ $worker hang" >"$dir/out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do [ -s "$dir/pid.0" ] && [ -s "$dir/pid.1" ] && break; sleep 0.1; done
  [ -s "$dir/pid.0" ] || fail "the ranks did not start"
  rank0=$(cat "$dir/pid.0")
  # In the sixth allreduce: rank 0's thread sleeps in it (its five earlier ones take milliseconds).
  sleep 2
  running "$rank0" || fail "SIG$sig: rank 0 ended before the signal"
  t0=$(date +%s%N)
  kill -"$sig" "$rank0"
  while running "$rank0"; do
    (( ($(date +%s%N) - t0) / 1000000 < 1000 )) || fail "SIG$sig: rank 0 still runs 1 s after it"
    sleep 0.01
  done
  took=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait "$launcher"; status=$?
  want=$((128 + $(kill -l "$sig")))
  # The launcher exits with the status of the rank that failed first: the signal's, not exit(1)'s.
  [ "$status" = "$want" ] || fail "SIG$sig: rank 0 ended with launcher status $status, want $want (killed by the signal)"
  ls "$dir" | grep -q '\.btr$' && fail "SIG$sig: a library wrote a backtrace file"
  echo "SIG$sig to rank 0 in an allreduce: ended by the signal in $took ms"
done
