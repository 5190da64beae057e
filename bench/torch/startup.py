"""What a torch job pays before its first result: `dist.init_process_group` and its first `dist.all_reduce` of one
float, per backend, as users call them. Importing torch (a second or more per process) is not counted: the ranks
first meet on the launcher's store, then each backend in turn is timed from just before init_process_group on rank 0,
which waits for the others there as it would in a job. Each backend gets its own store prefix and is destroyed
before the next; the order alternates between runs (--order-seed).

    PYTHONPATH=build/python torchrun --nproc-per-node 8 bench/torch/startup.py --backends gloo,hiercoll

Rank 0 prints one line per backend: STARTUP backend <name> ranks <N> init_ms <ms> first_allreduce_ms <ms> (the
second includes the first). Checks the all_reduce's result.
"""
import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist


def meet(store, name, rank, world):
    """Every rank here before any goes on (not timed)."""
    store.add(f"startup/{name}/arrived", 1)
    if rank == 0:
        while store.add(f"startup/{name}/arrived", 0) < world:
            time.sleep(0.001)
        store.set(f"startup/{name}/go", "1")
    store.wait([f"startup/{name}/go"], datetime.timedelta(seconds=600))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="gloo,hiercoll")
    parser.add_argument("--order-seed", type=int, default=0, help="odd: the backends in reverse order")
    args = parser.parse_args()
    backends = args.backends.split(",")
    if args.order_seed % 2:
        backends.reverse()
    if "hiercoll" in backends:
        import hiercoll_torch  # noqa: F401  (registers the backend; not timed)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False,
                          timeout=datetime.timedelta(seconds=600))
    for backend in backends:
        meet(store, backend, rank, world)
        start = time.perf_counter()
        dist.init_process_group(backend, store=dist.PrefixStore(f"startup/{backend}/pg", store), rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=600))
        init_ms = (time.perf_counter() - start) * 1e3
        x = torch.ones(1)
        dist.all_reduce(x)
        first_ms = (time.perf_counter() - start) * 1e3
        if x.item() != world:
            raise SystemExit(f"startup.py: {backend}: all_reduce gave {x.item()}, want {world}")
        if rank == 0:
            print(f"STARTUP backend {backend} ranks {world} init_ms {init_ms:.1f} first_allreduce_ms {first_ms:.1f}",
                  flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
