"""What torch's flight record costs a hiercoll call, natively recorded against torch's FlightRecorderHook: one process,
1 rank, three hiercoll groups taking turns on an 8 B dist.all_reduce (recorded natively; recording off with torch's
hook attached, as an adapter without native recording gets it; recording off and no hook), 9 rounds of 10,000 calls;
prints each group's median µs per call and the paired differences over "none". Each round also times torch's record()
alone: the entries a recorded all_reduce writes, recorded and retired from C++ with no collective (`_record_calls`).

    PYTHONPATH=build/python .venv/bin/python bench/torch/recorder_cost.py
"""
import os, time, sys, statistics
os.environ.setdefault("RANK","0"); os.environ.setdefault("WORLD_SIZE","1"); os.environ.setdefault("MASTER_ADDR","127.0.0.1"); os.environ.setdefault("MASTER_PORT","29557")
import torch, torch.distributed as dist, hiercoll_torch
c10d = dist.distributed_c10d
dist.init_process_group("gloo")
C = hiercoll_torch._C
native = dist.new_group(backend="hiercoll")
none = dist.new_group(backend="hiercoll"); C._record_flight(hiercoll_torch._backend_of(none), False)
c10d._FR_SELF_RECORDING_BACKENDS.discard("hiercoll")
hook = dist.new_group(backend="hiercoll"); C._record_flight(hiercoll_torch._backend_of(hook), False)
c10d._FR_SELF_RECORDING_BACKENDS.add("hiercoll")
hooks = c10d._world.pg_flight_recorder_hooks
print("hook attached:", hook in hooks, "native:", native in hooks, none in hooks)
t = torch.zeros(2)
def run(g, n):
    t0 = time.perf_counter()
    for _ in range(n): dist.all_reduce(t, group=g)
    return (time.perf_counter() - t0) / n * 1e6
groups = {"native": native, "hook": hook, "none": none}
for g in groups.values(): run(g, 2000)
res = {k: [] for k in [*groups, "record()"]}
backend = hiercoll_torch._backend_of(native)
for r in range(9):
    for k, g in groups.items(): res[k].append(run(g, 10000))
    res["record()"].append(C._record_calls(backend, t, 10000))
m = {k: statistics.median(v) for k, v in res.items()}
print({k: round(v, 2) for k, v in m.items()})
print("native - none", round(statistics.median([a - b for a, b in zip(res["native"], res["none"])]), 2),
      "hook - none", round(statistics.median([a - b for a, b in zip(res["hook"], res["none"])]), 2),
      "torch's record() alone", round(m["record()"], 2))
