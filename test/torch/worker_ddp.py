"""DDP training of a small model for a few steps; writes the final parameters of this rank to argv[2].
argv[1]: the backend. argv[3] (optional): a DDP comm hook, "fp16" or "allreduce"."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import hiercoll_torch  # noqa: F401

backend, out_path = sys.argv[1], sys.argv[2]
hook = sys.argv[3] if len(sys.argv) > 3 else ""
dist.init_process_group(backend=backend)
rank, size = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)  # the same initial model everywhere; DDP also broadcasts rank 0's
model = nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(16 * 4, 64), nn.GELU(), nn.LayerNorm(64),
                      nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 50))
if rank != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # DDP's initial broadcast must undo this
# Small buckets so several allreduces overlap with backward.
ddp = DDP(model, bucket_cap_mb=0.01)
if hook == "fp16":
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
elif hook == "allreduce":
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
for step in range(6):
    x = torch.randint(0, 50, (8, 4), generator=gen)
    y = torch.randint(0, 50, (8,), generator=gen)
    loss = nn.functional.cross_entropy(ddp(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

# torch 1.13's gloo runs a comm hook's Python callback on its own thread and may still be releasing it when
# the main thread exits (abort in PyEval_AcquireThread). A last collective orders that before exit.
dist.barrier()
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{out_path}.{rank}")
print(f"rank {rank} final loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
