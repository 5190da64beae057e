"""Where the time of one `dist.all_reduce` on a CUDA tensor goes, one rank, hiercoll beside NCCL: the blocking call,
the call with async_op=True and no wait, and the process group's own `allreduce([t])` with and without `wait()`
(no `dist` wrapper). Host microseconds per call, median of 5 rounds of 2000 calls, each round ended by
torch.cuda.synchronize(). A probe, not a table: compare the rows with each other and with bench/torch/call_latency.py.

    PYTHONPATH=build/python python bench/torch/call_parts.py
"""
import os
import statistics
import time

import torch
import torch.distributed as dist

import hiercoll_torch  # noqa: F401  registers the backend


def per_call(fn, calls=2000, rounds=5):
    for _ in range(100):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main():
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(2, device="cuda")
    for backend in ["hiercoll", "nccl"]:
        g = dist.new_group([0], backend=backend)
        rows = {
            "dist.all_reduce blocking": lambda: dist.all_reduce(t, group=g),
            "dist.all_reduce async, no wait": lambda: dist.all_reduce(t, group=g, async_op=True),
            "pg.allreduce([t]) + wait": lambda: g.allreduce([t]).wait(),
            "pg.allreduce([t]) no wait": lambda: g.allreduce([t]),
        }
        for name, fn in rows.items():
            print(f"{backend:9s} {name:34s} {per_call(fn):7.2f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
