"""A small DDP training run on torch.distributed with backend "hiercoll" (or any other, for comparison).

    torchrun --nproc_per_node=4 examples/torch_ddp/train_ddp.py --backend hiercoll
    mpirun -np 4 -x PYTHONPATH python3 examples/torch_ddp/train_ddp.py --backend gloo

Prints the loss every few steps and the samples/s of the whole group at the end.
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hiercoll_torch


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="hiercoll", help="hiercoll, gloo, nccl, mpi")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()

    hiercoll_torch.init_process_group(backend=args.backend)  # torchrun's or mpirun's environment
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, args.width), nn.GELU(), nn.Linear(args.width, args.width), nn.GELU(),
                          nn.Linear(args.width, 10))
    ddp = DDP(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)

    # A learnable task: the label is which of 10 random directions the input is closest to.
    gen = torch.Generator().manual_seed(1 + rank)
    centers = torch.randn(10, 64, generator=torch.Generator().manual_seed(7))
    start = None
    for step in range(args.steps):
        if step == 5:
            start = time.perf_counter()  # the first steps warm up
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        x = centers[y] + 2.0 * torch.randn(args.batch, 64, generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}", flush=True)
    elapsed = time.perf_counter() - start
    if rank == 0:
        samples = (args.steps - 5) * args.batch * size
        print(f"backend {args.backend}: {size} ranks, final loss {loss.item():.4f}, {samples / elapsed:.0f} samples/s")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
