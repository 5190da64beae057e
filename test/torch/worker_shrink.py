"""A DDP job that loses a rank and goes on without it (torch >= 2.15's dist.shrink_group). 4 ranks train a small model
for `kill_at` steps; then the last rank is SIGKILLed at the start of a step. The survivors' step fails (the peer watch
names the dead rank), they shrink the default group to the 3 of them, wrap the model in a new DDP and train on from the
failed step. Each survivor saves its parameters to <out>.<rank>; the test compares them with a serial reference. The
victim writes its moment of death to <out>.died; each survivor prints how long after it its group was shrunk.

    worker_shrink.py <out> <kill_at> <steps>"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import hiercoll_torch  # noqa: F401

out, kill_at, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("hiercoll")
rank, size = dist.get_rank(), dist.get_world_size()


def model_and_batch():
    """The model every rank starts from, and batch(rank, step): the data of a rank's step (the test recomputes them)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))

    def batch(r, step):
        g = torch.Generator().manual_seed(1000 * step + r)
        return torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)

    return model, batch


model, batch = model_and_batch()
ddp = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # no state: a new DDP wrapper can take over


def train_step(step):
    optimizer.zero_grad()
    x, y = batch(rank, step)
    F.mse_loss(ddp(x), y).backward()
    optimizer.step()


step = 0
while step < steps:
    if step == kill_at and rank == size - 1:
        print(f"rank {rank}: killed at step {step}", flush=True)
        with open(f"{out}.died.tmp", "w") as f:
            f.write(repr(time.time()))
        os.rename(f"{out}.died.tmp", f"{out}.died")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        train_step(step)
    except RuntimeError as e:
        print(f"rank {rank}: step {step} failed: {str(e)[:200]}", flush=True)
        if step != kill_at:
            raise
        before = [p.detach().clone() for p in model.parameters()]
        dist.shrink_group([size - 1])
        assert dist.get_world_size() == size - 1 and dist.get_rank() == rank, (dist.get_rank(), dist.get_world_size())
        # The failed step changed no parameter (the optimizer never ran); the new wrapper starts from them.
        assert all(torch.equal(a, b.detach()) for a, b in zip(before, model.parameters()))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        after = time.time() - float(open(f"{out}.died").read())
        print(f"rank {rank}: shrunk to {dist.get_world_size()} ranks {after:.3f} s after the death; step {step} again",
              flush=True)
        continue
    step += 1
torch.save({name: p.detach() for name, p in model.named_parameters()}, f"{out}.{rank}")
print(f"rank {rank}: trained {steps} steps on {dist.get_world_size()} ranks", flush=True)
dist.destroy_process_group()
