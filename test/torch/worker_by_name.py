"""Started without `import hiercoll_torch`: torch must find the backend by name through the package's entry point
(torch >= 2.14), and the group must then work: an allreduce checked against what every rank expects."""
import sys

import torch
import torch.distributed as dist

assert "hiercoll_torch" not in sys.modules, "hiercoll_torch was imported before init_process_group"
dist.init_process_group(backend="hiercoll")
assert "hiercoll_torch" in sys.modules, "init_process_group did not load hiercoll_torch"
assert dist.get_backend() == "hiercoll", dist.get_backend()
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.arange(100, dtype=torch.float32) * (rank + 1)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(100, dtype=torch.float32) * (size * (size + 1) // 2)), "allreduce"
print(f"rank {rank} of {size} found hiercoll by name", flush=True)
dist.destroy_process_group()
