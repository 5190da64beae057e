#!/usr/bin/env bash
# Faults under a real Slurm across 2 emulated nodes, 2 tasks a node, for docs/reliability.md's fault table (run inside
# test/cluster/with_cluster.sh 2; scripts/study/fault-times runs it). The same job on three stacks, each as its users
# launch it with srun --mpi=pmix:
#   hiercoll  torch, test/torch/worker_kill.py (a 1 MB dist.all_reduce loop), backend hiercoll
#   gloo      the same worker, backend gloo
#   openmpi   Open MPI's MPI_Allreduce, 1 MB (build/bench/allreduce_perf --backend mpi), its defaults
# and four faults: rank 3 SIGKILLed, rank 0 SIGKILLed, scancel, and a partition (iptables DROP between the nodes, both
# ways). Each prints one line per run:
#   FAULT STACK ended_ms=N named=K left=L
# ended_ms: from the fault to srun's end (-1: srun still running 60 s after it; the job is then scancelled); raised_ms
# (torch): from the fault to the last rank's error (-1: a rank never raised); named: ranks whose error named the dead
# rank (kills) or that raised (partition); left: job processes still running after srun ended. torch groups time out after 30 s here, hiercoll's heartbeat after 2 s (its default is 10 s:
# docs/tuning.md); Open MPI has neither (ULFM off, its default).
#   usage: slurm-fault-times.sh PYTHON [STACK...]
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=$1
shift
stacks=${*:-hiercoll gloo openmpi}
torch_tests=$root/test/torch
perf=$root/build/bench/allreduce_perf
dir=$(mktemp -d /var/tmp/hiercoll-slurm-faults.XXXXXX)  # seen by every node: each has its own /tmp
tag=hiercoll-fault-$$
rules() {  # rules -A|-D: the partition between the two nodes; both still reach slurmctld and srun (10.77.0.254), as a
  # cut between racks leaves the login node reachable. Dropping everything would cut Slurm's own control traffic:
  # srun would wait for task exits slurmstepd can no longer report.
  for n in 0 1; do
    local other=10.77.0.$((2 - n))
    ip netns exec hc$n iptables-legacy "$1" INPUT -i hcnic0 -s "$other" -j DROP 2>/dev/null
    ip netns exec hc$n iptables-legacy "$1" OUTPUT -o hcnic0 -d "$other" -j DROP 2>/dev/null
  done
}
trap 'rules -D; scancel --full --signal=KILL -u root 2>/dev/null; "$root/scripts/emulation/slurm" down >/dev/null 2>&1
      pkill -KILL -f "$tag-[0-9]" 2>/dev/null; rm -rf "$dir"' EXIT
trap 'exit 143' TERM INT  # the cleanup above runs on these too: a stopped study leaves no rank behind
"$root/scripts/emulation/slurm" up || exit 1
export SLURM_CONF=/run/hiercoll-slurm/slurm.conf
export HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_TIMEOUT_MS=60000 HIERCOLL_HEARTBEAT_TIMEOUT_MS=2000
export PYTHONPATH=$root/build/python${PYTHONPATH:+:$PYTHONPATH}
export GLOO_SOCKET_IFNAME=hcnic0 OMPI_MCA_btl_tcp_if_include=hcnic0 OMP_NUM_THREADS=1
now_ms() { date +%s%3N; }
# The tasks carry "$tag-RANK" in their command lines (srun's own has "$tag-$SLURM_PROCID" unexpanded).
running() { pgrep -f "$tag-[0-9]" | wc -l; }

# job STACK VICTIM RUN: srun's pid is in $job.
job() {
  local stack=$1 victim=$2 run=$3
  local cmd
  case $stack in
    # argv[0] renamed: the binary ignores it. Python finds its venv through argv[0]: the worker gets the tag as an
    # argument it does not read.
    openmpi) cmd="exec -a $tag-\$SLURM_PROCID $perf --backend mpi -b 1M -e 1M -n 100000000 -w 1" ;;
    *) cmd="exec $python $torch_tests/worker_kill.py $stack $victim $run 30 $tag-\$SLURM_PROCID" ;;
  esac
  # The victim kills itself only in the torch worker; Open MPI's is killed from here, like the partition's.
  srun -N 2 --ntasks-per-node 2 --mpi=pmix --kill-on-bad-exit=0 bash -c "$cmd" >"$run/out" 2>&1 &
  job=$!
}

# started RUN STACK: every rank past start-up and in the loop (30 s at most)
started() {
  local run=$1 stack=$2
  for _ in $(seq 300); do
    kill -0 "$job" 2>/dev/null || return 1
    if [ "$stack" = openmpi ]; then
      # allreduce_perf prints its table's first row once the warm-up and first timed iterations ran: too late for
      # -n 1e8. Four ranks running and 3 s past their start are in MPI_Allreduce.
      [ "$(running)" = 4 ] && { sleep 3; return 0; }
    else
      [ "$(grep -c 'in the loop' "$run/out")" = 4 ] && { sleep 0.5; return 0; }
    fi
    sleep 0.1
  done
  return 1
}

finish() {  # finish FAULT STACK RUN T0 COUNT_PATTERN
  local fault=$1 stack=$2 run=$3 t0=$4 pattern=$5
  local ended=-1
  while kill -0 "$job" 2>/dev/null && (( $(now_ms) - t0 < 60000 )); do sleep 0.02; done
  if ! kill -0 "$job" 2>/dev/null; then ended=$(( $(now_ms) - t0 )); fi
  rules -D
  [ "$ended" = -1 ] && scancel --signal=KILL "$(squeue -h -o %i | head -1)" 2>/dev/null
  wait "$job" 2>/dev/null
  sleep 0.2
  local named raised=-1
  named=$(grep -cE "$pattern" "$run/out")
  if [ "$stack" != openmpi ] && [ "$fault" != scancel ]; then
    # worker_kill.py: "noticed SECONDS" after the death, or "raised at EPOCH_SECONDS"
    raised=$(python3 - "$run/out" "$t0" "$fault" <<'EOF'
import re, sys
text, t0, fault = open(sys.argv[1]).read(), int(sys.argv[2]), sys.argv[3]
got = [float(s) * 1000 for s in re.findall(r"noticed ([0-9.]+)", text)]
got += [float(s) * 1000 - t0 for s in re.findall(r"raised at ([0-9.]+)", text)]
print(round(max(got)) if len(got) >= (4 if fault == "partition" else 3) else -1)
EOF
)
  fi
  echo "$fault $stack ended_ms=$ended raised_ms=$raised named=$named left=$(running)"
  { echo "== $fault $stack"; cat "$run/out"; } >&2
  pkill -KILL -f "$tag-[0-9]" 2>/dev/null
  sleep 0.5
}

# abandon FAULT STACK RUN: the job never got to the fault (its output on stderr); every field at -2.
abandon() {
  echo "$1 $2 ended_ms=-2 raised_ms=-2 named=0 left=$(running)"
  cat "$3/out" >&2
  pkill -KILL -f "$tag-[0-9]"
  wait "$job"
}

for stack in $stacks; do
  for fault in ${FAULTS:-kill3 kill0 scancel partition}; do
    run=$dir/$stack-$fault
    mkdir -p "$run"
    victim=-1
    case $fault in kill3) victim=3 ;; kill0) victim=0 ;; esac
    if [ "$stack" != openmpi ] && [ "$victim" != -1 ]; then
      # The torch victim kills itself at its 20th iteration, writing the moment first.
      job "$stack" "$victim" "$run"
      for _ in $(seq 600); do [ -e "$run/died" ] && break; kill -0 "$job" 2>/dev/null || break; sleep 0.05; done
      [ -e "$run/died" ] || { abandon "$fault" "$stack" "$run"; continue; }
      t0=$(python3 -c "import sys; print(int(float(open(sys.argv[1]).read()) * 1000))" "$run/died")
      finish "$fault" "$stack" "$run" "$t0" "noticed .*rank $victim"
      continue
    fi
    job "$stack" -1 "$run"
    started "$run" "$stack" || { abandon "$fault" "$stack" "$run"; continue; }
    t0=$(now_ms)
    case $fault in
      kill3|kill0) kill -KILL "$(pgrep -f "$tag-${victim}( |$)")" ;;
      scancel) scancel "$(squeue -h -o %i | head -1)" ;;
      partition) rules -A ;;
    esac
    case $fault in
      partition) finish "$fault" "$stack" "$run" "$t0" "raised|noticed|LOST|rror" ;;
      *) finish "$fault" "$stack" "$run" "$t0" "noticed .*rank $victim|rank $victim" ;;
    esac
  done
done
