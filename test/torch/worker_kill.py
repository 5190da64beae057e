"""Rank argv[2] SIGKILLs itself in the middle of an all_reduce loop (argv[1]: the backend; group timeout 60 s; torch's
flight recorder attached as torch attaches it by default); every other rank prints how long after the death its call
raised ("noticed SECONDS"), on the wall clock the processes share, and the error's first line. argv[3]: a directory
for the victim's moment of death."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

backend, victim, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if backend == "hiercoll":
    import hiercoll_torch  # noqa: F401

dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
t = torch.ones(1 << 18)
died = os.path.join(out_dir, "died")
try:
    for i in range(100000):
        if rank == victim and i == 20:
            with open(died + ".tmp", "w") as f:
                f.write(repr(time.time()))
            os.rename(died + ".tmp", died)
            os.kill(os.getpid(), signal.SIGKILL)
        dist.all_reduce(t)
        t.fill_(1)
except RuntimeError as e:
    now = time.time()
    print(f"rank {rank}: noticed {now - float(open(died).read()):.3f} ({str(e).splitlines()[0][:200]})", flush=True)
# The group is broken: left without destroying it, as a failed job does (the exit waits for the flight recorder's dump).
sys.exit(0)
