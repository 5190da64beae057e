#!/usr/bin/env bash
# A real Slurm across 2 emulated nodes (run inside with_cluster.sh 2; scripts/emulation/slurm starts slurmctld and a
# slurmd per node, each node its own host name), 2 tasks a node, as users launch with srun:
#   1. the C++ collectives checked against the serial reference, with PMIx (--mpi=pmix: rank 0 publishes the store's
#      address) and without (--mpi=none: the store on the first node of the node list); 2 nodes seen, 2 ranks each;
#   2. a torch DDP job on hiercoll, its final parameters equal to gloo's under the same srun (if PYTHON is given);
#   3. a rank killed in the middle of collectives (the last, then rank 0): every other rank names it, and srun ends
#      within 2 s;
#   4. scancel of a running job: no rank left running 2 s later.
# Exits 77 (skipped) where Slurm is not installed.
#   usage: slurm_check.sh MP_WORKER [PYTHON TORCH_TEST_DIR]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
worker=$1 python=${2:-} torch_tests=${3:-}
command -v slurmctld >/dev/null && command -v srun >/dev/null || { echo "slurm_check: no Slurm; skipped"; exit 77; }
# The nodes run what this tree built, as a cluster's do from a shared file system; each node has a /tmp of its own.
case "$root/" in
  /tmp/*) echo "FAIL: the tree is under /tmp ($root), which each emulated node has its own of: clone it elsewhere"
          exit 1 ;;
esac
dir=$(mktemp -d /var/tmp/hiercoll-slurm-check.XXXXXX)  # seen by every node: each has its own /tmp
tag=hiercoll-slurm-$$
trap '"$root/scripts/emulation/slurm" down >/dev/null 2>&1; pkill -KILL -f "^$tag" 2>/dev/null; rm -rf "$dir"' EXIT
"$root/scripts/emulation/slurm" up || exit 1
export SLURM_CONF=/run/hiercoll-slurm/slurm.conf
export HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_TIMEOUT_MS=60000
failed=0
fail() { echo "FAIL: $*"; failed=1; }
now_ms() { date +%s%3N; }
ranks_running() { pgrep -f "^$tag" | wc -l; }
# srun [options] SCENARIO: the worker on 2 nodes x 2 tasks, each task named after the check and its rank
srun_worker() {
  local options=()
  while [ "$1" != "--" ]; do options+=("$1"); shift; done
  shift
  srun -N 2 --ntasks-per-node 2 --kill-on-bad-exit=0 "${options[@]}" \
    bash -c "exec -a $tag-\$SLURM_PROCID $worker $*"
}

# 1. The collectives, with and without PMIx.
for mpi in pmix none; do
  start=$(now_ms)
  if srun_worker --mpi=$mpi -- scale >"$dir/scale.$mpi" 2>&1 &&
     grep -q "scale: 4 ranks on 2 nodes, every collective matched" "$dir/scale.$mpi"; then
    echo "srun --mpi=$mpi: 4 ranks on 2 nodes, every collective matched the serial reference ($(( $(now_ms) - start )) ms)"
  else
    fail "srun --mpi=$mpi scale"; cat "$dir/scale.$mpi"
  fi
done

# 2. DDP through torch, hiercoll against gloo, under one srun each.
if [ -n "$python" ]; then
  for backend in hiercoll gloo; do
    if ! GLOO_SOCKET_IFNAME=hcnic0 OMP_NUM_THREADS=1 srun -N 2 --ntasks-per-node 2 --mpi=pmix \
        "$python" "$torch_tests/worker_ddp.py" "$backend" "$dir/ddp-$backend" "" >"$dir/ddp.$backend" 2>&1; then
      fail "DDP on $backend under srun"; tail -30 "$dir/ddp.$backend"
    fi
  done
  if [ "$failed" = 0 ]; then
    "$python" - "$dir" <<'EOF' || fail "DDP under srun: hiercoll's parameters differ from gloo's"
import sys, torch
d = sys.argv[1]
worst = 0.0
for rank in range(4):
    a, b = torch.load(f"{d}/ddp-hiercoll.{rank}"), torch.load(f"{d}/ddp-gloo.{rank}")
    for k in a:
        worst = max(worst, (a[k] - b[k]).abs().max().item())
print(f"DDP under srun, 2 nodes x 2: 4 ranks, largest difference from gloo {worst:.2e}")
sys.exit(0 if worst <= 1e-5 else 1)
EOF
  fi
fi

# 3. A rank killed while the others wait on it in collectives: the last, and rank 0 (the peer watch's hub and, under
#    PMIx, the store's server).
for victim_rank in 3 0; do
  HIERCOLL_SOAK_ITERATIONS=100000000 srun_worker --mpi=pmix -- soak >"$dir/kill" 2>&1 &
  job=$!
  for _ in $(seq 300); do [ "$(ranks_running)" = 4 ] && break; sleep 0.1; done
  sleep 2  # past start-up, in the soak's collectives
  victim=$(pgrep -f "^$tag-$victim_rank ")
  if [ -z "$victim" ]; then
    fail "rank $victim_rank is not running"; cat "$dir/kill"; continue
  fi
  t0=$(now_ms)
  kill -KILL "$victim"
  wait "$job"
  took=$(( $(now_ms) - t0 ))
  named=$(grep -c "^LOST rank [0-9] peer $victim_rank " "$dir/kill")
  echo "rank $victim_rank killed: srun ended after $took ms; $named of 3 ranks named it; $(ranks_running) left running"
  ((took <= 2000)) || fail "srun ended $took ms after rank $victim_rank was killed"
  [ "$named" = 3 ] || { fail "not every rank named rank $victim_rank"; cat "$dir/kill"; }
  [ "$(ranks_running)" = 0 ] || fail "ranks left running after srun ended"
done

# 4. scancel of a job in the middle of collectives.
HIERCOLL_SOAK_ITERATIONS=100000000 srun_worker --mpi=pmix -- soak >"$dir/scancel" 2>&1 &
job=$!
for _ in $(seq 300); do [ "$(ranks_running)" = 4 ] && break; sleep 0.1; done
sleep 2
id=$(squeue -h -o %i | head -1)
t0=$(now_ms)
scancel "$id"
while (( $(ranks_running) > 0 && $(now_ms) - t0 < 10000 )); do sleep 0.02; done
took=$(( $(now_ms) - t0 ))
echo "scancel: every rank ended $took ms after it; $(ranks_running) left running"
((took <= 2000)) || fail "ranks still running $took ms after scancel"
wait "$job"
exit $failed
