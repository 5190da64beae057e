"""A clean exit is a goodbye: rank argv[2] trains a DDP step with the others, calls destroy_process_group() and
exits at once (os._exit), while the other ranks keep their group (the DDP module holds it, as a job whose ranks finish at different
times does). They must not take its leaving for a death: no abort hook runs and their group reports no error.
argv[1]: a directory for the leaver's note that it is gone."""
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ErrorType

import hiercoll_torch  # noqa: F401

note_dir, leaver = sys.argv[1], int(sys.argv[2])
dist.init_process_group(backend="hiercoll")
rank, size = dist.get_rank(), dist.get_world_size()
backend = dist.get_backend_impl(dist.distributed_c10d._get_default_group(), torch.device("cpu"))
failed = threading.Event()
backend.register_abort_hook(0, failed.set)

torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 4))
model(torch.randn(16, 8, generator=torch.Generator().manual_seed(rank))).sum().backward()
dist.barrier()

note = os.path.join(note_dir, "gone")
if rank == leaver:
    backend.unregister_abort_hook(0)
    dist.destroy_process_group()
    with open(note + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(note + ".tmp", note)
    print(f"rank {rank}: destroyed its group and exits", flush=True)
    # No destructor runs after this (the DDP module keeps the group object alive until then anyway): what tells the
    # peers is destroy_process_group() alone, as for a process whose objects outlive the interpreter.
    os._exit(0)

deadline = time.monotonic() + 60
while not os.path.exists(note) and time.monotonic() < deadline:
    time.sleep(0.05)
pid = int(open(note).read())
# Its process ends within milliseconds of the note; a death would be reported 0.3 s after it (the watch's grace).
while time.monotonic() < deadline:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            if f.read().split(") ")[-1].startswith("Z"):
                break  # a zombie: its sockets are closed
    except (ProcessLookupError, FileNotFoundError):
        break
    time.sleep(0.05)
time.sleep(1.5)
problems = []
if failed.is_set():
    problems.append(f"rank {leaver}'s clean exit ran this rank's abort hooks")
if backend.get_error() != ErrorType.SUCCESS:
    problems.append(f"the group reports {backend.get_error()} after rank {leaver} left cleanly")
backend.unregister_abort_hook(0)
dist.destroy_process_group()
print(f"rank {rank}: {len(problems)} problems {problems}", flush=True)
sys.exit(1 if problems else 0)
