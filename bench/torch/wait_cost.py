"""What a waiting rank costs through torch: CPU-seconds per second that the ranks waiting in `dist.all_reduce` for a
late rank 0 spend, for several backends side by side in one run (each a group of its own over the same ranks, taking
turns round by round on the same tensors).

    PYTHONPATH=build/python torchrun --nproc-per-node 2 bench/torch/wait_cost.py --backends hiercoll,gloo

Each round, for each backend and size: `--calls` allreduces with rank 0 on time, `--calls` with every rank sleeping
`--late` ms before each (idle), then `--calls` with rank 0 alone sleeping that long before each (late). A waiting
rank's figure is (process CPU time late - idle) / (wall time late - on time): what waiting itself costs, every thread
of the process counted (time.process_time is CLOCK_PROCESS_CPUTIME_ID), with the call's own work taken out, and what
the call costs more after an idle spell (cold caches: on this machine a 4 MB copy takes twice the CPU after 100 ms of
sleep), which a late call pays whatever the waiting cost. Prints, per backend and size, the median over rounds of the waiting ranks' mean, and one
JSON line per cell. A benchmark: it checks only that each backend's first call gives the right sum.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from call_latency import parse_size  # this directory is the script's, first on sys.path


def make_group(backend):
    if backend == "hiercoll":
        import hiercoll_torch  # noqa: F401
    return dist.new_group(backend=backend)


def timed_calls(group, tensor, calls, late_s, rank, everyone=False):
    """(process CPU seconds, wall seconds) of `calls` allreduces, rank 0 (every rank if `everyone`) sleeping late_s
    before each."""
    dist.barrier(group=group)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        if (rank == 0 or everyone) and late_s:
            time.sleep(late_s)
        dist.all_reduce(tensor, group=group)
    return time.process_time() - cpu, time.perf_counter() - wall


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="hiercoll,gloo")
    parser.add_argument("--sizes", default="8,4M", help="bytes per allreduce, comma-separated")
    parser.add_argument("--late", type=float, default=100, help="ms rank 0 sleeps before each late call")
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    backends = args.backends.split(",")
    groups = {b: make_group(b) for b in backends}
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    tensors = {n: torch.ones(max(1, n // 4), dtype=torch.float32) for n in sizes}
    for b in backends:  # the first call of each: right, and every connection made before timing
        t = torch.full((4,), float(rank + 1))
        dist.all_reduce(t, group=groups[b])
        assert torch.all(t == size * (size + 1) / 2), (b, t)
        # A ring of sends: hiercoll opens its network after create on one host (a thread's worth of start-up work,
        # which would otherwise land in the first round's waiting), and point-to-point calls wait for it.
        ring = [dist.P2POp(dist.isend, t, (rank + 1) % size, groups[b]),
                dist.P2POp(dist.irecv, torch.empty_like(t), (rank - 1) % size, groups[b])]
        for request in dist.batch_isend_irecv(ring):
            request.wait()
    figures = {(b, n): [] for b in backends for n in sizes}
    for _ in range(args.rounds):
        for n in sizes:
            for b in backends:
                timed_calls(groups[b], tensors[n], 2, 0, rank)  # warm
                _, wall_on = timed_calls(groups[b], tensors[n], args.calls, 0, rank)
                cpu_idle, _ = timed_calls(groups[b], tensors[n], args.calls, args.late / 1e3, rank, everyone=True)
                cpu_late, wall_late = timed_calls(groups[b], tensors[n], args.calls, args.late / 1e3, rank)
                mine = (cpu_late - cpu_idle) / max(1e-9, wall_late - wall_on) if rank else 0.0
                share = torch.tensor([mine], dtype=torch.float64)
                dist.all_reduce(share)  # over the default (gloo) group: rank 0 adds nothing
                figures[(b, n)].append(share.item() / (size - 1))
    if rank == 0:
        print(f"# {size} ranks, rank 0 {args.late:g} ms late before each of {args.calls} calls; waiting ranks' "
              f"CPU-s/s, median of {args.rounds} rounds")
        print(f"{'bytes':>10} " + " ".join(f"{b:>10}" for b in backends))
        for n in sizes:
            print(f"{n:>10} " + " ".join(f"{statistics.median(figures[(b, n)]):>10.4f}" for b in backends))
        for (b, n), values in figures.items():
            print(json.dumps({"backend": b, "bytes": n, "ranks": size, "late_ms": args.late,
                              "cpu_s_per_s": statistics.median(values), "rounds": values}))
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
