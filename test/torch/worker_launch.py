"""Started by torchrun or mpirun rather than the test's own launcher: joins through the launcher's
environment and checks an allreduce and an allgather against what every rank knows to expect."""
import os

import torch
import torch.distributed as dist

import hiercoll_torch

hiercoll_torch.init_process_group()
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.arange(1000, dtype=torch.float64) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(1000, dtype=torch.float64) * (size * (size + 1) // 2)), "allreduce"
ranks = [torch.empty(1, dtype=torch.int64) for _ in range(size)]
dist.all_gather(ranks, torch.tensor([rank]))
assert [int(r) for r in ranks] == list(range(size)), "allgather"
print(f"rank {rank} of {size} ok, MASTER_ADDR={os.environ['MASTER_ADDR']}", flush=True)
dist.destroy_process_group()
