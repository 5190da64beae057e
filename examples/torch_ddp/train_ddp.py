"""A small DDP training run on torch.distributed with backend "hiercoll" (or any other, for comparison).

    torchrun --nproc_per_node=4 examples/torch_ddp/train_ddp.py --backend hiercoll
    mpirun -np 4 -x PYTHONPATH python3 examples/torch_ddp/train_ddp.py --backend gloo

Prints the loss every few steps and, at the end, the samples/s of the whole group and the median step time
(bench/torch/ddp_step.py runs it for several backends side by side).
"""
import argparse
import statistics
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
    warmup, step_times = 5, []
    for step in range(args.steps):
        begin = time.perf_counter()
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        x = centers[y] + 2.0 * torch.randn(args.batch, 64, generator=gen)
        loss = nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step >= warmup:  # the first steps warm up (allocations, DDP's bucket rebuild after step 0)
            step_times.append(time.perf_counter() - begin)
        if rank == 0 and step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}", flush=True)
    if rank == 0:
        samples = len(step_times) * args.batch * size
        print(f"backend {args.backend}: {size} ranks, final loss {loss.item():.4f}, "
              f"{samples / sum(step_times):.0f} samples/s, median step {1e3 * statistics.median(step_times):.3f} ms, "
              f"{sum(p.numel() for p in model.parameters())} parameters", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
