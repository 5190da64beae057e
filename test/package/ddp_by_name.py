"""One rank of a DDP training run as a user writes it, started by torchrun: init_process_group(BACKEND) with no
`import hiercoll_torch` (torch >= 2.14 finds hiercoll by name through the installed package's entry point; older
releases need the import, as docs/torch.md says). Rank 0 saves the
trained weights to OUT; scripts/release/install-check compares hiercoll's with gloo's, bit for bit (2 ranks: every
sum is of two numbers, so any order of adding gives the same bits).
    usage: torchrun --standalone --nproc-per-node 2 ddp_by_name.py BACKEND OUT"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

backend, out = sys.argv[1], sys.argv[2]
assert "hiercoll_torch" not in sys.modules, "hiercoll_torch was imported before init_process_group"
if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14) and backend == "hiercoll":
    import hiercoll_torch  # noqa: F401  torch < 2.14 finds no backend through entry points: the import registers it
dist.init_process_group(backend)
assert dist.get_backend() == backend, dist.get_backend()
assert (backend == "hiercoll") == ("hiercoll_torch" in sys.modules), "hiercoll_torch loaded by the wrong backend"
rank = dist.get_rank()
torch.manual_seed(0)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
ddp = DistributedDataParallel(model, bucket_cap_mb=0.005)  # several buckets: several allreduces a step
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
for step in range(30):
    x, y = torch.randn(16, 32, generator=data), torch.randn(16, 8, generator=data)
    loss = torch.nn.functional.mse_loss(ddp(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
if rank == 0:
    torch.save(model.state_dict(), out)
print(f"rank {rank}: {backend} trained 30 steps, loss {loss.item():.4f}", flush=True)
dist.destroy_process_group()
