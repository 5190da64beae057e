"""A DDP job under torchrun's elastic agent (--max-restarts 1): on the first attempt the last rank exits in the
middle of training (step argv[3]) while the others wait in the gradient allreduce; the agent ends them and starts a
second attempt, which trains argv[4] steps from the start. argv[1]: backend; argv[2]: a directory where each rank
notes, on the wall clock shared by the processes, when the rank died and when each rank of the next attempt had
initialized its group (and when its process started, before torch is imported, and when the imports were done), and
where the second attempt saves rank 0's parameters."""
import os
import sys
import time

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
with open(os.path.join(sys.argv[2], f"start.{attempt}.{os.environ['RANK']}"), "w") as f:
    f.write(repr(time.time()))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

backend, out_dir, die_at, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if backend == "hiercoll":
    import hiercoll_torch  # noqa: F401
with open(os.path.join(out_dir, f"imported.{attempt}.{os.environ['RANK']}"), "w") as f:
    f.write(repr(time.time()))

dist.init_process_group(backend)
rank, size = dist.get_rank(), dist.get_world_size()
with open(os.path.join(out_dir, f"ready.{attempt}.{rank}"), "w") as f:
    f.write(repr(time.time()))

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(
    torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(steps):
    if attempt == 0 and step == die_at and rank == size - 1:
        with open(os.path.join(out_dir, "died"), "w") as f:
            f.write(repr(time.time()))
        os._exit(1)  # a crash in the middle of training: no goodbye
    g = torch.Generator().manual_seed(1000 * step + rank)
    x, y = torch.randn(16, 8, generator=g), torch.randn(16, 4, generator=g)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
if rank == 0:
    torch.save({k: v.detach() for k, v in model.module.state_dict().items()}, os.path.join(out_dir, "params"))
dist.destroy_process_group()
