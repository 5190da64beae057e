"""Errors that break the group: ranks disagreeing on a collective's type, then a peer that dies. Every surviving
rank must get a RuntimeError naming the problem (the dead rank within 2 s, far inside HIERCOLL_TIMEOUT_MS), later
calls on the broken group must fail at once, a new group must work, and teardown must not hang."""
import os
import sys
import time

import torch
import torch.distributed as dist

import checks
import hiercoll_torch  # noqa: F401

dist.init_process_group(backend="hiercoll")
rank, size = dist.get_rank(), dist.get_world_size()
problems = []


def expect_error(what, fn, *fragments):
    checks.expect_error(problems, what, fn, *fragments)


# Odd ranks pass float64 where even ranks pass float32: every rank is told, none hangs.
mixed = torch.ones(4, dtype=torch.float32 if rank % 2 == 0 else torch.float64)
expect_error("dtype differs across ranks", lambda: dist.all_reduce(mixed), "different count, type or op")
# The group is broken now: the next call fails at once, naming the first error.
start = time.monotonic()
expect_error("call on the broken group", lambda: dist.all_reduce(torch.ones(3)), "broken by an earlier error")
if time.monotonic() - start > 5:
    problems.append("the call on the broken group took more than 5 s to fail")
# A new group (a new communicator) works.
fresh = dist.new_group(list(range(size)))
t = torch.full((6,), float(rank))
dist.all_reduce(t, group=fresh)
if not torch.equal(t, torch.full((6,), float(sum(range(size))))):
    problems.append(f"all_reduce in a new group gave {t.tolist()}")

# The last rank dies without a word; the others' next collective must fail within 2 s (the peer watch), naming it.
dist.barrier(group=fresh)
if rank == size - 1:
    print(f"rank {rank}: exiting abruptly", flush=True)
    os._exit(0)
timeout_s = int(os.environ["HIERCOLL_TIMEOUT_MS"]) / 1000
start = time.monotonic()
expect_error("a peer died", lambda: dist.all_reduce(torch.ones(1000), group=fresh),
             f"Connection closed by peer rank {size - 1}", "ALLREDUCE", f"rank {size - 1} (pid", "died")
elapsed = time.monotonic() - start
if elapsed > 2:
    problems.append(f"the dead peer was noticed after {elapsed:.1f} s (timeout {timeout_s:.0f} s), not within 2 s")
dist.destroy_process_group()  # must return, broken groups included
print(f"rank {rank}: {len(problems)} problems; dead peer noticed in {elapsed:.1f} s", flush=True)
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
