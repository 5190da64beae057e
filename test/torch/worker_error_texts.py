"""The errors of a timed-out barrier, a failed monitored barrier and a dead peer, in the words gloo uses: the patterns
below are the ones PyTorch's own tests look for (torch/testing/_internal/distributed/distributed_test.py), and
test_backend.py runs this script with gloo as well as hiercoll, so the patterns are checked against gloo itself.
Run on 3 ranks: `python worker_error_texts.py gloo|hiercoll`. Each case uses a group of its own, left broken."""
import os
import re
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

backend = sys.argv[1]
if backend == "hiercoll":
    import hiercoll_torch  # noqa: F401

dist.init_process_group(backend=backend)
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 3, "run on 3 ranks"
problems = []
# distributed_test.py's _test_barrier_timeout: what a timed-out collective's message must contain, as a word.
TIMEOUT_WORDS = " (Timed out|closed|timeout) "


def expect(what, fn, pattern, errors=(RuntimeError,)):
    """fn() must raise one of `errors` whose message matches the regular expression `pattern`."""
    try:
        fn()
    except errors as e:
        if not re.search(pattern, str(e)):
            problems.append(f"{what}: {str(e)!r} does not match {pattern!r}")
        return e
    problems.append(f"{what}: no error raised")
    return None


def group(seconds=30):
    return dist.new_group(list(range(size)), timeout=timedelta(seconds=seconds))


def sync():
    dist.barrier()  # the default group stays healthy: it lines the cases up


# 1. Rank 1 stays away from a monitored barrier: rank 0 names it, rank 2 is told to look at rank 0's logs.
g = group()
if rank == 0:
    expect("monitored barrier, rank 1 missing", lambda: g.monitored_barrier(timedelta(seconds=1)),
           "Rank 1 failed to pass monitoredBarrier")
elif rank == 2:
    expect("monitored barrier, released by nobody", lambda: g.monitored_barrier(timedelta(seconds=1)),
           "Rank 2 successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank 0")
sync()

# 2. Ranks 1 and 2 stay away, wait_all_ranks: rank 0 names both.
g = group()
if rank == 0:
    expect("monitored barrier, wait_all_ranks",
           lambda: g.monitored_barrier(timedelta(seconds=1), wait_all_ranks=True),
           "Ranks 1, 2 failed to pass monitoredBarrier")
sync()

# 3. Rank 0 has no time at all (distributed_test.py's test_monitored_barrier_gloo_rank_0_timeout).
g = group()
if rank == 0:
    expect("monitored barrier, timeout 0", lambda: g.monitored_barrier(timedelta(seconds=0)),
           "Rank 0 timed out in monitoredBarrier")
sync()

# 4. A barrier only rank 0 calls times out (_test_barrier_timeout), not before its timeout.
g = group(seconds=2)
if rank == 0:
    start = time.monotonic()
    expect("barrier timeout", lambda: dist.barrier(group=g), TIMEOUT_WORDS)
    if time.monotonic() - start < 2 - 0.1:
        problems.append(f"the barrier timed out after {time.monotonic() - start:.2f} s, before its 2 s")
sync()

# 5. Rank 2 dies without a word: the others' next collective says the connection is gone (gloo: "Connection closed by
# peer [address]:port", or "Read error ...: Connection reset by peer" when the socket held unread bytes; hiercoll
# names the rank), long before the group's timeout.
g = group(seconds=120)
dist.barrier(group=g)
if rank == 2:
    print(f"rank {rank}: exiting abruptly", flush=True)
    os._exit(0)
error = expect("peer died", lambda: dist.all_reduce(torch.ones(1000), group=g), "Connection (closed|reset) by peer")
if backend == "hiercoll" and error is not None:
    # torch's words, the dead rank by number, the operation, and the type ProcessGroupNCCL raises for a lost peer.
    for wanted in (TIMEOUT_WORDS, "Connection closed by peer rank 2", "ALLREDUCE", "died"):
        if not re.search(wanted, str(error)):
            problems.append(f"peer died (hiercoll): {str(error)!r} does not match {wanted!r}")
    if not isinstance(error, dist.DistNetworkError):
        problems.append(f"peer died (hiercoll): {type(error).__name__}, not DistNetworkError")

print(f"rank {rank}: {len(problems)} problems", flush=True)
if problems:
    print("\n".join(problems), file=sys.stderr)
if backend == "hiercoll":
    dist.destroy_process_group()  # broken groups and a dead peer included: must return at once
    sys.exit(1 if problems else 0)
sys.stdout.flush()
os._exit(1 if problems else 0)  # gloo's teardown of the groups left broken above may wait for the dead rank
