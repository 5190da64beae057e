"""torch's fault-tolerance contract (torch >= 2.15, `dist._reconfigure`), the scenarios of PyTorch's own
test_c10d_fault_tolerance.py, on the default group of the backend under test (argv[1]: hiercoll or gloo) made with
enable_reconfigure, 4 ranks. Handles travel through the job's store, as a job's out-of-band rendezvous would.
Every step checks an all_reduce and an all_gather on the reconfigured group against what its members must get.

    first configure (4) -> shrink (ranks 0-2; rank 3 left out) -> grow (4 again) -> split into halves by handles ->
    merge as a set (the backend orders it) -> abort, then reconfigure -> a reused uuid is refused on every rank

Prints "rank R: N problems" and, for the reused uuid, how long the refusal took."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

backend = sys.argv[1]
if backend == "hiercoll":
    import hiercoll_torch  # noqa: F401

dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60), enable_reconfigure=True)
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
assert size == 4, "this scenario needs 4 ranks"
pg = dist.group.WORLD
store = dist.distributed_c10d._get_default_store()
exchanges = 0
problems = []


def exchange(value):
    """Every rank's `value` (every rank calls this, in the same order), through the store."""
    global exchanges
    exchanges += 1
    store.set(f"test/{exchanges}/{rank}", str(value))
    keys = [f"test/{exchanges}/{r}" for r in range(size)]
    store.wait(keys)
    return [store.get(k).decode() for k in keys]


def handles_of(members):
    """Every rank's current handle (each rank calls this); those of `members`, in their order."""
    every = exchange(dist._get_reconfigure_handle(pg))
    return [every[r] for r in members]


def check(step, members):
    """On a member: the group is `members` in order, and its collectives give what they must."""
    if pg.size() != len(members) or pg.rank() != members.index(rank):
        problems.append(f"{step}: rank {pg.rank()} of {pg.size()}, expected {members.index(rank)} of {len(members)}")
        return
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=pg)
    want = float(sum(r + 1 for r in members))
    if not torch.equal(t, torch.full((1000,), want)):
        problems.append(f"{step}: all_reduce gave {t[:3].tolist()}..., expected {want}")
    out = [torch.empty(1, dtype=torch.int64) for _ in members]
    dist.all_gather(out, torch.tensor([rank]), group=pg)
    if [int(o) for o in out] != members:
        problems.append(f"{step}: all_gather gave {[int(o) for o in out]}, expected {members}")


def reconfigure(uuid, handles, timeout=None):
    kwargs = {"timeout": timeout} if timeout else {}
    dist._reconfigure(uuid=uuid, handles=handles, group=pg, **kwargs).wait()


everyone = list(range(size))
handles = handles_of(everyone)
reconfigure(1, handles)
check("first configure", everyone)

# Shrink: rank 3 is left out (it stays out of the call, as a failed rank would).
survivors = [0, 1, 2]
handles = handles_of(survivors)
if rank in survivors:
    reconfigure(2, handles)
    check("shrink to 3", survivors)

# Grow back to 4: the rank left out joins again with a handle of its old communicator.
handles = handles_of(everyone)
reconfigure(3, handles)
check("grow to 4", everyone)

# Split by handles: two halves, each with a uuid of its own.
half = [0, 1] if rank < 2 else [2, 3]
handles = handles_of(half)
reconfigure(4 if rank < 2 else 5, handles)
check("split in halves", half)

# Merge as a set: the backend chooses the order (every rank must agree on it); the check uses that order.
handles = handles_of(everyone)
reconfigure(6, set(handles))
order = [int(r) for r in exchange(pg.rank())]
members = sorted(everyone, key=lambda r: order[r])
if sorted(order) != everyone:
    problems.append(f"merge as a set: group ranks {order} are not a permutation")
else:
    check("merge as a set", members)

# After an abort the group is reconfigured anew.
pg.abort()
handles = handles_of(everyone)
reconfigure(7, handles)
check("after abort", everyone)

# A uuid used before: the test says who must refuse it (hiercoll: every rank; gloo: its rank 0, which alone claims
# the uuid, while the others reconnect over the uuid's old rendezvous keys).
handles = handles_of(everyone)
start = time.monotonic()
try:
    reconfigure(7, handles, timeout=datetime.timedelta(seconds=5))
    print(f"rank {rank}: reused uuid accepted", flush=True)
except RuntimeError as e:
    print(f"rank {rank}: reused uuid refused in {time.monotonic() - start:.1f} s: {str(e)[:160]}", flush=True)

print(f"rank {rank}: {len(problems)} problems", flush=True)
if problems:
    print("\n".join(problems), file=sys.stderr)
exchange("done")
dist.destroy_process_group()
sys.exit(1 if problems else 0)
