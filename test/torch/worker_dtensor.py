"""DTensor on a 2-D DeviceMesh of 4 ranks (2 x 2) over hiercoll, against the same program on gloo:
distribute_tensor, redistribute Shard <-> Replicate on each mesh dimension, and a tensor-parallel MLP via
parallelize_module trained for a few steps. Writes this rank's results to argv[2]."""
import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import hiercoll_torch  # noqa: F401

backend, out_path = sys.argv[1], sys.argv[2]
dist.init_process_group(backend=backend)
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 4, "a 2 x 2 mesh"
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
results = {}

torch.manual_seed(0)  # the same global tensor everywhere
full = torch.randn(8, 6)
d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
results["local shard"] = d.to_local().clone()
results["shard->replicate"] = d.redistribute(mesh, [Replicate(), Replicate()]).to_local().clone()
results["shard(0), replicate"] = d.redistribute(mesh, [Shard(0), Replicate()]).to_local().clone()
r = distribute_tensor(full, mesh, [Replicate(), Replicate()])
results["replicate->shard"] = r.redistribute(mesh, [Shard(1), Shard(0)]).to_local().clone()
results["sum over the tp dim"] = (d.redistribute(mesh, [Replicate(), Shard(1)]).sum(dim=1)).full_tensor().clone()

# Tensor parallel within each "tp" pair, data parallel across "dp" (gradients averaged by hand).
torch.manual_seed(1)
mlp = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 6))
mlp = parallelize_module(mlp, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(mlp.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(10 + mesh.get_local_rank("dp"))  # one batch per data-parallel replica
for step in range(5):
    x = torch.randn(4, 6, generator=gen)
    loss = ((mlp(x) - x) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    dp = mesh["dp"].get_group()
    for p in mlp.parameters():
        dist.all_reduce(p.grad.to_local(), op=dist.ReduceOp.SUM, group=dp)
        p.grad.to_local().div_(2)
    opt.step()
for name, p in mlp.named_parameters():
    results["tp " + name] = p.full_tensor().detach().clone()
results["loss"] = loss.detach().clone()
torch.save(results, f"{out_path}.{rank}")
print(f"rank {rank} final loss {loss.item():.6f}", flush=True)
# The model and the mesh hold the process groups: drop them first, so that the groups and gloo's worker threads
# end while the interpreter is whole (a gloo thread that frees a tensor during interpreter finalization crashes in
# torch itself, pytorch/pytorch#190489; seen once in this test's gloo reference run).
del mlp, opt, mesh, results, d, r, dp, p
gc.collect()
dist.destroy_process_group()
