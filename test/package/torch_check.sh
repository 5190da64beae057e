#!/usr/bin/env bash
# python -m hiercoll_torch.check, as a user runs it after installing: exit 0 here, with every line ok (the torch the
# binding was built for, libfabric found, 2 ranks' all_reduce equal to gloo's); and exit 1 with a FAIL line naming
# the file searched where libfabric cannot be loaded, the 2 ranks of this host still equal to gloo (provider unix).
#   usage: torch_check.sh PYTHON   (PYTHONPATH names the package)
set -uo pipefail
python=$1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { echo "FAIL: $*"; cat "$out"; exit 1; }
timeout 300 "$python" -m hiercoll_torch.check >"$out" 2>&1 || fail "the check failed on this machine"
cat "$out"
grep -q "^\[FAIL\]" "$out" && fail "a line failed, yet the status was 0"
for what in torch libfabric hwloc PMIx CUDA collectives; do
  grep -q "^\[ok\] $what:" "$out" || fail "no ok line for $what"
done
missing=/nonexistent/hiercoll-check/libfabric.so.1
HIERCOLL_LIBFABRIC=$missing timeout 300 "$python" -m hiercoll_torch.check >"$out" 2>&1 &&
  fail "the check passed with HIERCOLL_LIBFABRIC=$missing"
grep -q "^\[FAIL\] libfabric: .*" "$out" && grep -q "$missing" "$out" ||
  fail "without libfabric the check does not say which file it searched"
grep -q "^\[ok\] collectives:" "$out" || fail "without libfabric the ranks of one host did not run"
echo "without libfabric: status 1, naming $missing; the 2 ranks of this host equal to gloo"
