"""FSDP2 (fully_shard) training of a small transformer on CPU; writes this rank's full parameters after
training to argv[2] (a DTensor per parameter, gathered to full tensors).

Then a Distributed Checkpoint round trip (torch.distributed.checkpoint, whose planning gathers, scatters and
broadcasts Python objects over the group): the sharded model and optimizer saved to argv[2]-dcp, loaded into a fresh
model sharded the same way, and its parameters and momentum buffers written beside the trained ones
("restored <name>", "momentum <name>", "restored momentum <name>").

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
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

import hiercoll_torch  # noqa: F401

backend, out_path, precision = sys.argv[1], sys.argv[2], sys.argv[3]
divide = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None
dist.init_process_group(backend=backend)
rank, size = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (size,))

vocab, width = 64, 32
policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision == "bf16" \
    else MixedPrecisionPolicy()


def sharded_model(seed):
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Embedding(vocab, width),
        nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True),
        nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=64, dropout=0.0, batch_first=True),
        nn.Linear(width, vocab),
    )
    for layer in (model[1], model[2]):
        fully_shard(layer, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    if backend == "gloo":
        model.set_force_sum_reduction_for_comms(True)
    if divide is not None:
        model.set_gradient_divide_factor(divide)
    # SGD, not Adam: Adam divides by the gradient's own scale, which turns last-bit differences in the summation
    # order (a ring here, gloo's own there) into visible ones on parameters whose gradients are near zero.
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def full_state(model, opt, prefix=""):
    """Parameters and momentum buffers, gathered to full tensors."""
    state = {}
    for name, p in model.named_parameters():
        state[prefix + name] = p.full_tensor().detach().clone()
        state[f"{prefix}momentum {name}"] = opt.state[p]["momentum_buffer"].full_tensor().clone()
    return state


model, opt = sharded_model(0)

gen = torch.Generator().manual_seed(100 + rank)
for step in range(12):
    x = torch.randint(0, vocab, (4, 8), generator=gen)
    y = torch.randint(0, vocab, (4, 8), generator=gen)
    loss = nn.functional.cross_entropy(model(x).reshape(-1, vocab).float(), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()

full = full_state(model, opt)

checkpoint = f"{out_path}-dcp"
model_state, optim_state = get_state_dict(model, opt)
dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=checkpoint)
fresh, fresh_opt = sharded_model(1)  # other initial weights, and momentum buffers (get_state_dict makes them)
model_state, optim_state = get_state_dict(fresh, fresh_opt)
state = {"model": model_state, "optim": optim_state}
dcp.load(state, checkpoint_id=checkpoint)
set_state_dict(fresh, fresh_opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
full.update(full_state(fresh, fresh_opt, "restored "))

torch.save(full, f"{out_path}.{rank}")
print(f"rank {rank} final loss {loss.item():.6f}", flush=True)
# The model and the mesh hold the process groups: drop them first, so that the groups and gloo's worker threads
# end while the interpreter is whole (a gloo thread that frees a tensor during interpreter finalization crashes in
# torch itself, pytorch/pytorch#190489; seen once in this test's gloo reference run).
del model, opt, fresh, fresh_opt, state, model_state, optim_state, mesh, full
gc.collect()
dist.destroy_process_group()
