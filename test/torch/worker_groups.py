"""Subgroups of a hiercoll world: new_group (even ranks, groups of one, a hiercoll group beside a gloo one),
ProcessGroup.split_group, set_timeout, and monitored_barrier, whose failure must name the missing rank.
Every result is checked against a serial reference each rank computes from all ranks' inputs."""
import os
import sys
from datetime import timedelta

import faulthandler
import torch
import torch.distributed as dist

import checks
import hiercoll_torch  # noqa: F401

RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
failures = []
checked = 0


def data(rank, numel, salt):
    return torch.rand(numel, generator=torch.Generator().manual_seed(100 * rank + salt), dtype=torch.float64)


def check(what, got, expected):
    global checked
    checked += 1
    if got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-12, atol=1e-12):
        failures.append(f"{what}: got {got.tolist()[:4]}..., expected {expected.tolist()[:4]}...")


def expect_error(what, fn, *words):
    """fn must raise RuntimeError whose message contains every one of `words`."""
    global checked
    checked += 1
    checks.expect_error(failures, what, fn, *words)


def test_new_group():
    # Even ranks: odd ranks are not members and must get NON_GROUP_MEMBER.
    evens = list(range(0, SIZE, 2))
    group = dist.new_group(evens)
    if RANK in evens:
        t = data(RANK, 1000, 1)
        dist.all_reduce(t, group=group)
        check("all_reduce over the even ranks", t, sum(data(r, 1000, 1) for r in evens))
        if dist.get_backend(group) != "hiercoll":
            failures.append(f"new_group took backend {dist.get_backend(group)}")
        # Group ranks, not global ranks, in the group's own calls.
        got = torch.empty(7, dtype=torch.float64)
        dist.broadcast(got if RANK != evens[-1] else data(RANK, 7, 2), src=evens[-1], group=group)
        if RANK != evens[-1]:
            check("broadcast from the last even rank", got, data(evens[-1], 7, 2))
    elif group != dist.GroupMember.NON_GROUP_MEMBER:
        failures.append(f"rank {RANK} is not even but got a group")

    # A group of one per rank: every rank creates every group, in the same order.
    for r in range(SIZE):
        solo = dist.new_group([r])
        if r == RANK:
            t = data(RANK, 33, 3)
            dist.all_reduce(t, group=solo)
            check("all_reduce in a group of one", t, data(RANK, 33, 3))
            outs = [torch.empty(33, dtype=torch.float64)]
            dist.all_gather(outs, t, group=solo)
            check("all_gather in a group of one", outs[0], t)

    # Group ranks differ from global ranks: the odd ranks broadcast from their last member, named by group rank.
    odds = list(range(1, SIZE, 2))
    group = dist.new_group(odds)
    if RANK in odds:
        src = odds[-1]
        t = data(src, 5, 4) if RANK == src else torch.empty(5, dtype=torch.float64)
        dist.broadcast(t, group_src=len(odds) - 1, group=group)
        check("broadcast from the odd ranks' last group rank", t, data(src, 5, 4))


def test_split_group():
    """ProcessGroup.split_group, what DeviceMesh and dist.split_group call: halves of the world, then a group
    that only rank 0 belongs to (the others get None)."""
    world = dist.distributed_c10d._get_default_group()
    half = SIZE // 2
    mine = list(range(half)) if RANK < half else list(range(half, SIZE))
    sub = world.split_group(mine, group_name=f"half{mine[0]}")
    if sub is None or sub.size() != len(mine) or sub.rank() != mine.index(RANK):
        failures.append(f"split_group gave {sub} for {mine}")
        return
    t = data(RANK, 999, 5)
    sub.allreduce([t]).wait()
    check("all_reduce on a split half", t, sum(data(r, 999, 5) for r in mine))

    solo = world.split_group([0], group_name="rank0")
    if (solo is None) != (RANK != 0):
        failures.append(f"rank {RANK}: split_group([0]) gave {solo}")
    elif solo is not None:
        t = data(RANK, 10, 6)
        solo.allreduce([t]).wait()
        check("all_reduce on a split group of one", t, data(RANK, 10, 6))


def test_set_timeout_and_monitored_barrier():
    group = dist.new_group(backend="hiercoll", timeout=timedelta(seconds=60))
    backend = group._get_backend(torch.device("cpu"))
    backend.set_timeout(timedelta(seconds=30))
    group.monitored_barrier(timedelta(seconds=20), wait_all_ranks=True)  # everyone arrives
    t = data(RANK, 4, 7)
    dist.all_reduce(t, group=group)
    check("all_reduce after a monitored barrier", t, sum(data(r, 4, 7) for r in range(SIZE)))

    # The last rank stays away: rank 0 names it, the others are not released. The group is not used after.
    late = SIZE - 1
    broken = dist.new_group(backend="hiercoll", timeout=timedelta(seconds=4))
    if RANK == 0:
        expect_error("monitored_barrier with a missing rank", lambda: broken.monitored_barrier(
            timedelta(seconds=2), wait_all_ranks=True), f"Rank {late} failed to pass monitoredBarrier in 2000 ms",
            f"rank {late} did not arrive within 2000 ms")
    elif RANK != late:
        expect_error("monitored_barrier on a rank rank 0 did not release",
                     lambda: broken.monitored_barrier(timedelta(seconds=2)), "successfully reached monitoredBarrier",
                     f"rank 0 did not release rank {RANK}")
    dist.barrier()


if __name__ == "__main__":
    faulthandler.enable()
    dist.init_process_group(backend="hiercoll")
    test_new_group()
    test_split_group()
    test_set_timeout_and_monitored_barrier()
    dist.barrier()
    print(f"rank {RANK}: {checked} checks, {len(failures)} failed", flush=True)
    if failures:
        print("\n".join(failures[:40]), file=sys.stderr)
        sys.exit(1)
    dist.destroy_process_group()
