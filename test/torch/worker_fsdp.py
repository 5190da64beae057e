"""FSDP2 (fully_shard) training of a small transformer on CPU; writes this rank's full parameters after
training to argv[2] (a DTensor per parameter, gathered to full tensors).

argv[1]: backend. argv[3]: "fp32" or "bf16" (MixedPrecisionPolicy with bf16 parameters, fp32 reduction).
argv[4]: gradient divide factor, or "" for FSDP2's default (the data-parallel size).

FSDP2 reduce-scatters gradients with ReduceOp.AVG, or PREMUL_SUM for a divide factor other than the group
size. gloo has neither, so its run forces SUM reductions and FSDP2 divides on the side: the same arithmetic
reached another way."""
import gc
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import hiercoll_torch  # noqa: F401

backend, out_path, precision = sys.argv[1], sys.argv[2], sys.argv[3]
divide = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None
dist.init_process_group(backend=backend)
rank, size = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (size,))

torch.manual_seed(0)
vocab, width = 64, 32
model = nn.Sequential(
    nn.Embedding(vocab, width),
    nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True),
    nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True),
    nn.Linear(width, vocab),
)
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision == "bf16" \
    else MixedPrecisionPolicy()
for layer in (model[1], model[2]):
    fully_shard(layer, mesh=mesh, mp_policy=policy)
fully_shard(model, mesh=mesh, mp_policy=policy)
if backend == "gloo":
    model.set_force_sum_reduction_for_comms(True)
if divide is not None:
    model.set_gradient_divide_factor(divide)
# SGD, not Adam: Adam divides by the gradient's own scale, which turns last-bit differences in the summation
# order (a ring here, gloo's own there) into visible ones on parameters whose gradients are near zero.
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

gen = torch.Generator().manual_seed(100 + rank)
for step in range(12):
    x = torch.randint(0, vocab, (4, 8), generator=gen)
    y = torch.randint(0, vocab, (4, 8), generator=gen)
    loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

full = {name: p.full_tensor().detach().clone() for name, p in model.named_parameters()}
torch.save(full, f"{out_path}.{rank}")
print(f"rank {rank} final loss {loss.item():.6f}", flush=True)
# The model and the mesh hold the process groups: drop them first, so that the groups and gloo's worker threads
# end while the interpreter is whole (a gloo thread that frees a tensor during interpreter finalization crashes in
# torch itself, pytorch/pytorch#190489; seen once in this test's gloo reference run).
del model, opt, mesh, full
gc.collect()
dist.destroy_process_group()
