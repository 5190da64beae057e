#!/usr/bin/env bash
# libfabric is loaded at run time, never linked (lib/transport/fabric/libfabric.hpp):
#   1. libhiercoll.so names no libfabric among the libraries it needs;
#   2. HIERCOLL_LIBFABRIC naming the host's libfabric: a 2-rank job's collectives match the serial reference;
#   3. HIERCOLL_LIBFABRIC naming a file that is not there: the job fails within 5 s, every rank's error naming the
#      file searched and what to install, and the launcher's status is not 0.
#   usage: runtime_libfabric.sh LIBHIERCOLL HIERCOLL_LAUNCH MP_WORKER
set -uo pipefail
lib=$1 launch=$2 worker=$3
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

needed=$(readelf -d "$lib" | grep NEEDED)
grep -q libfabric <<<"$needed" && fail "$lib links libfabric: $needed"
echo "$lib: no libfabric among its NEEDED libraries"

host_lib=$(ldconfig -p | awk '/libfabric\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$host_lib" ] || fail "no libfabric.so.1 in the loader's cache (ldconfig -p)"
HIERCOLL_LIBFABRIC=$host_lib HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo \
  "$launch" -n 2 --timeout 120 -- "$worker" scale >"$out" 2>&1 || { cat "$out"; fail "the job with HIERCOLL_LIBFABRIC=$host_lib failed"; }
grep -q "scale: 0 mismatches" "$out" || { cat "$out"; fail "no result with HIERCOLL_LIBFABRIC=$host_lib"; }
echo "HIERCOLL_LIBFABRIC=$host_lib: 2 ranks, every collective matched"

missing=/nonexistent/hiercoll-test/libfabric.so.1
start=$(date +%s%3N)
HIERCOLL_LIBFABRIC=$missing "$launch" -n 2 --timeout 60 -- "$worker" scale >"$out" 2>&1 && { cat "$out"; fail "a job without its libfabric succeeded"; }
took=$(( $(date +%s%3N) - start ))
((took < 5000)) || fail "the job without libfabric took $took ms to fail"
for rank in 0 1; do
  grep "^\S*:[0-9]* \[$rank\] HIERCOLL WARN libfabric could not be loaded" "$out" >/dev/null ||
    { cat "$out"; fail "rank $rank did not report the missing libfabric"; }
done
grep -q "HIERCOLL_LIBFABRIC=$missing" "$out" || { cat "$out"; fail "the error does not name the file searched"; }
grep -q "apt-get install libfabric1" "$out" || { cat "$out"; fail "the error does not say what to install"; }
echo "HIERCOLL_LIBFABRIC=$missing: both ranks failed in $took ms naming it and what to install"
