"""Bad input gives a Python RuntimeError (or torch's own ValueError) naming the problem, on every rank alike, and the group stays usable."""
import os
import sys

import torch
import torch.distributed as dist

import checks
import hiercoll_torch  # noqa: F401

dist.init_process_group(backend="hiercoll")
rank, size = dist.get_rank(), dist.get_world_size()
problems = []


def expect_error(what, fn, *fragments):
    # torch 2.x checks some arguments itself (e.g. all_gather's dtypes) and raises ValueError before the backend
    # sees the call; the user still gets an error naming the problem.
    checks.expect_error(problems, what, fn, *fragments, errors=(RuntimeError, ValueError))


expect_error("non-contiguous", lambda: dist.all_reduce(torch.ones(4, 6).t()), "contiguous")
expect_error("int16 dtype", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int16)), "Short", "not supported")
expect_error("all_gather count",
             lambda: dist.all_gather([torch.empty(3) for _ in range(size + 1)], torch.ones(3)), "output list")
expect_error("all_gather size", lambda: dist.all_gather([torch.empty(4) for _ in range(size)], torch.ones(3)),
             "elements")
expect_error("all_gather dtype",
             lambda: dist.all_gather([torch.empty(3, dtype=torch.int32) for _ in range(size)], torch.ones(3)),
             "dtype")
expect_error("reduce_scatter size",
             lambda: dist.reduce_scatter(torch.empty(2), [torch.ones(3) for _ in range(size)]), "elements")
gather_into = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
expect_error("all_gather_into_tensor size", lambda: gather_into(torch.empty(size * 3 + 1), torch.ones(3)),
             "world size")
expect_error("all_to_all_single splits",
             lambda: dist.all_to_all_single(torch.empty(size, 2), torch.ones(size, 2), [1] * size, [2] * size),
             "split sizes")
expect_error("bitwise op", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.BAND),
             "not supported")
expect_error("avg on ints", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG), "avg", "int32")
# A receive from any source whose sender sent more than it holds: the receiver's error names the sizes.
expect_error("sparse max", lambda: dist.all_reduce(torch.ones(3).to_sparse(), op=dist.ReduceOp.MAX), "sparse",
             "SUM only")
expect_error("sparse shapes differ", lambda: dist.all_reduce(torch.ones(3 + rank).to_sparse()), "different shapes")
expect_error("root out of range", lambda: dist.broadcast(torch.ones(3), src=size), "outside the group")
expect_error("destination out of range", lambda: dist.send(torch.ones(3), dst=size + 5), "outside the group")
if rank == 0:
    expect_error("recv from any source, sizes differ", lambda: dist.recv(torch.empty(3), tag=5), "any rank",
                 "posted for 12 bytes", "truncated")
elif rank == 1:
    dist.send(torch.ones(5), 0, tag=5)

# Still usable: a real collective after all of that.
t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
if not torch.equal(t, torch.full((5,), float(size * (size + 1) // 2))):
    problems.append(f"allreduce after errors gave {t.tolist()}")

print(f"rank {rank}: {len(problems)} problems", flush=True)
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
dist.destroy_process_group()
