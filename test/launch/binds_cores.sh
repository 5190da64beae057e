#!/usr/bin/env bash
# hiercoll_launch pins rank r to the r-th CPU it may use where there is a CPU for every rank (--bind-to core, the
# default), and leaves the ranks alone with --bind-to none or when the ranks outnumber the CPUs.
#   usage: binds_cores.sh HIERCOLL_LAUNCH
set -uo pipefail
launch=$1
fail() { echo "FAIL: $*"; exit 1; }
# The launcher's own CPUs, as taskset lists them one by one (the reference the pins are checked against).
mapfile -t cpus < <(python3 -c 'import os; print("\n".join(str(c) for c in sorted(os.sched_getaffinity(0))))')
all=$(python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
# One write(2) per rank: the ranks share the launcher's output, and a pipe keeps a short write whole.
affinity='python3 -c "import os; os.write(1, (\"%s %s\n\" % (os.environ[\"HIERCOLL_RANK\"], sorted(os.sched_getaffinity(0)))).encode())"'

n=${#cpus[@]}
out=$("$launch" -n "$n" -- bash -c "$affinity") || fail "launch failed"
for ((r = 0; r < n; ++r)); do
  echo "$out" | grep -qx "$r \[${cpus[r]}\]" || fail "rank $r not pinned to CPU ${cpus[r]}: $out"
done
echo "$n ranks pinned one per CPU"

out=$("$launch" -n "$n" --bind-to none -- bash -c "$affinity") || fail "launch failed"
[ "$(echo "$out" | grep -c ", ")" = "$(( all > 1 ? n : 0 ))" ] || fail "--bind-to none pinned: $out"
out=$("$launch" -n "$(( n + 1 ))" -- bash -c "$affinity") || fail "launch failed"
[ "$(echo "$out" | grep -c ", ")" = "$(( all > 1 ? n + 1 : 0 ))" ] || fail "more ranks than CPUs, yet pinned: $out"
echo "--bind-to none and more ranks than CPUs leave the ranks unpinned"
