"""DDP training of a small model for 20 steps; writes the final parameters of this rank to argv[2].
argv[1]: the backend. argv[3] (optional): comma-separated options: a comm hook ("fp16", "allreduce"),
"static_graph", "find_unused" (a branch that only some steps use), "sparse" (the embedding's gradients sparse: DDP
allreduces them as sparse tensors), "bucket_view"
(gradient_as_bucket_view), "powersgd" (PowerSGD's hook, whose future callbacks issue collectives and wait for them;
one bucket, as the hook's callbacks on several buckets race with backward on CPU backends)."""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import hiercoll_torch  # noqa: F401

backend, out_path = sys.argv[1], sys.argv[2]
options = set(filter(None, sys.argv[3].split(","))) if len(sys.argv) > 3 else set()
hiercoll_torch.init_process_group(backend=backend)  # also under mpirun, across emulated nodes
rank, size = dist.get_rank(), dist.get_world_size()



class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Embedding(50, 16, sparse="sparse" in options), nn.Flatten(),
                                  nn.Linear(16 * 4, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 64), nn.GELU(),
                                  nn.Linear(64, 50))
        self.branch = nn.Linear(50, 50)  # under find_unused, used on odd steps only

    def forward(self, x, use_branch):
        y = self.body(x)
        return self.branch(y) if use_branch else y


torch.manual_seed(0)  # the same initial model everywhere; DDP also broadcasts rank 0's
model = Model()
if rank != 0:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # DDP's initial broadcast must undo this
# Small buckets so several allreduces overlap with backward.
ddp = DDP(model, bucket_cap_mb=25 if "powersgd" in options else 0.01, static_graph="static_graph" in options,
          find_unused_parameters="find_unused" in options, gradient_as_bucket_view="bucket_view" in options)
if "fp16" in options:
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.fp16_compress_hook)
elif "allreduce" in options:
    ddp.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
elif "powersgd" in options:
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=2, start_powerSGD_iter=3)
    ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)

opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0 if "sparse" in options else 0.9)

gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data
for step in range(20):
    x = torch.randint(0, 50, (8, 4), generator=gen)
    y = torch.randint(0, 50, (8,), generator=gen)
    loss = nn.functional.cross_entropy(ddp(x, "find_unused" not in options or step % 2 == 1), y)
    opt.zero_grad()
    loss.backward()
    opt.step()

# torch 1.13's gloo runs a comm hook's Python callback on its own thread and may still be releasing it when
# the main thread exits (abort in PyEval_AcquireThread). A last collective orders that before exit.
dist.barrier()
torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, f"{out_path}.{rank}")
print(f"rank {rank} final loss {loss.item():.6f}", flush=True)
dist.destroy_process_group()
