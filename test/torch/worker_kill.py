"""Rank argv[2] SIGKILLs itself in the middle of an all_reduce loop (argv[1]: the backend; group timeout argv[4]
seconds, 60 by default; torch's flight recorder attached as torch attaches it by default); every other rank prints how
long after the death its call raised ("noticed SECONDS"), on the wall clock the processes share, and the error's
first line. argv[3]: a directory for the victim's moment of death. Victim -1: no rank dies; a rank whose call raises
(a partition, a timeout) prints "raised" and the error. Under srun or mpirun (no RANK set), the ranks meet through
hiercoll_torch.init_process_group, on either backend."""
import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

backend, victim, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
timeout = datetime.timedelta(seconds=float(sys.argv[4]) if len(sys.argv) > 4 else 60)
if backend == "hiercoll" or "RANK" not in os.environ:
    import hiercoll_torch

if "RANK" in os.environ:
    dist.init_process_group(backend, timeout=timeout)
else:
    hiercoll_torch.init_process_group(backend, timeout=timeout)
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
        if i == 0:
            print(f"rank {rank}: in the loop", flush=True)
except RuntimeError as e:
    now, first_line = time.time(), str(e).splitlines()[0][:200]
    if os.path.exists(died):
        print(f"rank {rank}: noticed {now - float(open(died).read()):.3f} ({first_line})", flush=True)
    else:
        print(f"rank {rank}: raised at {now:.3f} ({first_line})", flush=True)
# The group is broken: left without destroying it, as a failed job does (the exit waits for the flight recorder's dump).
sys.exit(0)
