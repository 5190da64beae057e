#!/usr/bin/env bash
# libfabric is loaded at run time, never linked (lib/transport/fabric/libfabric.hpp):
#   1. libhiercoll.so names no libfabric among the libraries it needs, nor PMIx (loaded at run time as well);
#   2. HIERCOLL_LIBFABRIC naming the host's libfabric: a 2-rank job's collectives match the serial reference;
#   3. HIERCOLL_LIBFABRIC naming a file that is not there, no provider named: one host's job runs without it
#      (provider unix), every collective matching;
#   4. the same with a libfabric provider named (as a job across hosts needs one): the job fails within 5 s, every
#      rank failing, one naming the file searched and what to install (the other may fail on its leaving first),
#      and the launcher's status not 0.
#   usage: runtime_libfabric.sh LIBHIERCOLL HIERCOLL_LAUNCH MP_WORKER
set -uo pipefail
lib=$1 launch=$2 worker=$3
fail() { echo "FAIL: $*"; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT

needed=$(readelf -d "$lib" | grep NEEDED)
grep -q libfabric <<<"$needed" && fail "$lib links libfabric: $needed"
grep -q libpmix <<<"$needed" && fail "$lib links PMIx (loaded at run time too: lib/launch/pmix.hpp): $needed"
echo "$lib: no libfabric and no libpmix among its NEEDED libraries"

host_lib=$(ldconfig -p | awk '/libfabric\.so\.1 .*x86-64/ {print $NF; exit}')
[ -n "$host_lib" ] || fail "no libfabric.so.1 in the loader's cache (ldconfig -p)"
HIERCOLL_LIBFABRIC=$host_lib HIERCOLL_FABRIC_PROVIDER=tcp HIERCOLL_FABRIC_IFACE=lo \
  "$launch" -n 2 --timeout 120 -- "$worker" scale >"$out" 2>&1 || { cat "$out"; fail "the job with HIERCOLL_LIBFABRIC=$host_lib failed"; }
grep -q "scale: 0 mismatches" "$out" || { cat "$out"; fail "no result with HIERCOLL_LIBFABRIC=$host_lib"; }
echo "HIERCOLL_LIBFABRIC=$host_lib: 2 ranks, every collective matched"

missing=/nonexistent/hiercoll-test/libfabric.so.1
HIERCOLL_LIBFABRIC=$missing "$launch" -n 2 --timeout 120 -- "$worker" scale >"$out" 2>&1 ||
  { cat "$out"; fail "one host's job without libfabric failed"; }
grep -q "scale: 0 mismatches" "$out" || { cat "$out"; fail "no result without libfabric"; }
echo "HIERCOLL_LIBFABRIC=$missing, one host: 2 ranks, every collective matched (provider unix)"

start=$(date +%s%3N)
HIERCOLL_LIBFABRIC=$missing HIERCOLL_FABRIC_PROVIDER=tcp "$launch" -n 2 --timeout 60 -- "$worker" scale >"$out" 2>&1 && { cat "$out"; fail "a job without its libfabric succeeded"; }
took=$(( $(date +%s%3N) - start ))
((took < 5000)) || fail "the job without libfabric took $took ms to fail"
# A rank's error (the worker prints it): the rank that opens its endpoint first names what is missing; the other may
# fail on its leaving before it opens its own.
grep -q "^ERROR \[fabric error\]: libfabric could not be loaded" "$out" ||
  { cat "$out"; fail "no rank reported the missing libfabric"; }
[ "$(grep -c '^hiercoll_launch: rank [0-9]* exited with [1-9]' "$out")" = 2 ] ||
  { cat "$out"; fail "not every rank failed"; }
grep -q "HIERCOLL_LIBFABRIC=$missing" "$out" || { cat "$out"; fail "the error does not name the file searched"; }
grep -q "apt-get install libfabric1" "$out" || { cat "$out"; fail "the error does not say what to install"; }
echo "HIERCOLL_LIBFABRIC=$missing: both ranks failed in $took ms, the error naming it and what to install"
