"""A rank blocked in dist.all_reduce while its peer stops calling: it prints "waiting" and waits until a signal
ends it (the test sends SIGTERM, as torchrun and Slurm do). The peer sleeps until it is ended too. argv[1] (optional): the backend, hiercoll by default."""
import os
import sys
import time

import torch
import torch.distributed as dist

backend = sys.argv[1] if len(sys.argv) > 1 else "hiercoll"
if backend == "hiercoll":
    import hiercoll_torch  # noqa: F401

dist.init_process_group(backend=backend)
t = torch.ones(1000)
dist.all_reduce(t)
if dist.get_rank() == 1:
    time.sleep(120)
    sys.exit(0)
print(f"waiting pid {os.getpid()}", flush=True)
dist.all_reduce(t)
print("the all_reduce without rank 1 completed", flush=True)
