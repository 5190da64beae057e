"""init_process_group with one backend per device, "cpu:hiercoll,cuda:<other>" (argv[1] names the other one):
CPU tensors must go through hiercoll, subgroups get the same split, and results match the serial reference."""
import sys

import torch
import torch.distributed as dist

import hiercoll_torch

other = sys.argv[1]
dist.init_process_group(backend=f"cpu:hiercoll,cuda:{other}")
rank, size = dist.get_rank(), dist.get_world_size()
failures = []


def expect(what, ok):
    if not ok:
        failures.append(what)


world = dist.distributed_c10d._get_default_group()
cpu_backend = world._get_backend(torch.device("cpu"))
expect(f"the CPU backend is hiercoll's, not {cpu_backend.name()}", cpu_backend.name() == "hiercoll")
cuda_backend = world._get_backend(torch.device("cuda"))
expect(f"the CUDA backend is {other}, not {cuda_backend.name()}", cuda_backend.name() == other)
expect(f"the backend string names both: {dist.get_backend()}", "cpu:hiercoll" in dist.get_backend())

t = torch.arange(500, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
expect("all_reduce on CPU tensors", torch.equal(t, torch.arange(500, dtype=torch.float32) * (size * (size + 1) // 2)))

evens = dist.new_group(list(range(0, size, 2)))
if rank % 2 == 0:
    sub_backend = evens._get_backend(torch.device("cpu"))
    expect("the subgroup's CPU backend is hiercoll's", sub_backend.name() == "hiercoll")
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=evens)
    expect("all_reduce in the even subgroup", x.item() == float(sum(range(0, size, 2))))

dist.barrier()
print(f"rank {rank}: {len(failures)} failed {failures}", flush=True)
dist.destroy_process_group()
sys.exit(1 if failures else 0)
