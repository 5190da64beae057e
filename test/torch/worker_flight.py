"""torch's flight recorder on hiercoll groups (hiercoll records into it natively, bindings/torch/recorder.hpp; an
adapter built without that leaves it to the hook torch >= 2.15 attaches). Three collectives succeed, then rank 2 stops calling collectives while the others all_reduce: they
time out, and every rank's record is dumped (TORCH_FR_DUMP_TEMP_FILE), the idle rank's too, which only hears that
its peers failed. A failed call raises at once, the dump under way beside it; the exit waits for the dump. The test
reads the dumps with torchfrtrace once every rank has ended."""
import datetime
import os
import pickle
import sys
import time

import torch
import torch.distributed as dist

import hiercoll_torch  # noqa: F401

dump_prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
dist.init_process_group("hiercoll", timeout=datetime.timedelta(seconds=float(sys.argv[1])))
rank = dist.get_rank()
hooked = dist.group.WORLD in dist.distributed_c10d._world.pg_flight_recorder_hooks
print(f"rank {rank}: recorded natively: {hiercoll_torch._C.records_flight_natively and not hooked}", flush=True)
t = torch.ones(10)
dist.all_reduce(t)
dist.broadcast(t, 0)
dist.all_reduce(t)
if rank == 2:
    # Idle, as a rank stuck in its data loader would be; its record must still be written. torch writes the dump file
    # in place (c10d::DebugInfoWriter), so the file exists before it is whole: this waits until it reads as a whole
    # pickle, for os._exit below would end the write under way.
    def dumped():
        try:
            with open(f"{dump_prefix}{rank}", "rb") as f:
                pickle.load(f)
            return True
        except Exception:  # absent, or cut short: a truncated pickle raises one of several errors
            return False

    deadline = time.monotonic() + 60
    while not dumped() and time.monotonic() < deadline:
        time.sleep(0.1)
    print(f"rank {rank}: record dumped: {dumped()}", flush=True)
    os._exit(0)
try:
    dist.all_reduce(t)
    print(f"rank {rank}: the all_reduce without rank 2 completed", flush=True)
except RuntimeError as e:
    print(f"rank {rank}: failed", flush=True)
# The group is broken: left without destroying it, as a failed job does, by the interpreter's own exit (which waits for
# the dump under way).
sys.exit(0)
