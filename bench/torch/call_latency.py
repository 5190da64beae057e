"""Per-call cost of torch.distributed's collectives as users call them, for several backends side by side in one run:
each backend gets a process group of its own over the same ranks (`dist.new_group`), and the backends take turns,
round by round, on the same tensors. `fake` is torch's no-op backend (torch.testing._internal.distributed.fake_pg):
what torch itself costs per call, the floor under every backend. `cxx` is hiercoll's C++ API called from C++ in these
same processes on the same tensors (CPU only; a group of its own): with it beside `hiercoll` and `fake`, what the
binding adds (hiercoll - cxx - fake) is measured in one run, free of the drift between separate benchmark runs.
`hiercoll-nofr` is hiercoll without torch's flight record: its native recording turned off for that group (or, with an
adapter that leaves the recording to torch, torch's hook detached), and the two side by side give the recording's cost.

    # one process (a GPU, or one CPU rank)
    PYTHONPATH=build/python python bench/torch/call_latency.py --device cuda --backends hiercoll,nccl,fake
    # several ranks, every collective
    PYTHONPATH=build/python torchrun --nproc-per-node 2 bench/torch/call_latency.py --backends hiercoll,cxx,fake \
        --ops all_reduce,broadcast,all_gather_into_tensor,reduce_scatter_tensor

Ops (--ops): `dist.all_reduce` (float32 sum, in place), `dist.broadcast` (from rank 0, in place),
`dist.all_gather_into_tensor` and `dist.reduce_scatter_tensor` (sum); a size is the whole buffer, as in nccl-tests
(all_gather's output, reduce_scatter's input: each rank's part is size / ranks). Reports, per op, backend and size,
the median over `--rounds` rounds of rank 0's mean microseconds per blocking call; on CUDA tensors the round ends
with torch.cuda.synchronize(), so device time that the calls do not hide is counted. Prints a table and one JSON
line per cell, which also gives each round's time on the slowest rank (`slowest_rank_rounds`). A benchmark: it checks
only that the first call of each backend but `fake` gives the right result.
"""
import argparse
import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    return int(float(text[:-1]) * units[text[-1]]) if text[-1] in units else int(text)


def make_group(backend):
    if backend == "fake":
        # Registers the "fake" backend, whose collectives return at once without touching the tensors.
        import torch.testing._internal.distributed.fake_pg  # noqa: F401
    elif backend in ("hiercoll", "hiercoll-nofr", "cxx"):
        import hiercoll_torch  # noqa: F401
        group = dist.new_group(backend="hiercoll")
        if backend == "hiercoll-nofr":  # without torch's flight record (TORCH_FR_BUFFER_SIZE=0's effect)
            hook = getattr(dist.distributed_c10d._world, "pg_flight_recorder_hooks", {}).pop(group, None)
            if hook is not None:  # an adapter that leaves the recording to torch's hook
                hook.remove()
            if getattr(hiercoll_torch._C, "records_flight_natively", False):
                hiercoll_torch._C._record_flight(hiercoll_torch._backend_of(group), False)
        return group
    return dist.new_group(backend=backend)


def flight_recorded(group, backend):
    """Whether `group`'s calls go into torch's flight record (torch >= 2.15, not TORCH_FR_BUFFER_SIZE=0): through the
    hook torch attaches to a backend that does not record natively, or hiercoll's own recording."""
    if group in getattr(dist.distributed_c10d._world, "pg_flight_recorder_hooks", {}):
        return True
    if backend in ("hiercoll", "hiercoll-nofr", "cxx"):
        import hiercoll_torch
        if getattr(hiercoll_torch._C, "records_flight_natively", False):
            return hiercoll_torch._C._record_flight(hiercoll_torch._backend_of(group))
    return False


OPS = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")


def make_tensors(op, nbytes, size, device):
    """(input, output) of `op` on a buffer of `nbytes` in all; in-place ops use one tensor for both."""
    whole = max(size, nbytes // 4)
    whole -= whole % size  # all_gather and reduce_scatter split the buffer among the ranks
    if op in ("all_reduce", "broadcast"):
        t = torch.zeros(whole, dtype=torch.float32, device=device)
        return t, t
    part = torch.zeros(whole // size, dtype=torch.float32, device=device)
    full = torch.zeros(whole, dtype=torch.float32, device=device)
    return (part, full) if op == "all_gather_into_tensor" else (full, part)


def check_first_call(op, backend, call, tensors, rank, size):
    """One call on known inputs; exits if a real backend's result is wrong (the no-op backend's is not checked)."""
    inp, out = tensors
    inp.fill_(rank + 1)
    call(tensors, 1)
    if backend == "fake":
        return
    if op == "broadcast":
        expected = torch.ones_like(out)
    elif op == "all_gather_into_tensor":
        expected = torch.arange(1, size + 1, dtype=out.dtype, device=out.device).repeat_interleave(inp.numel())
    else:  # all_reduce, reduce_scatter_tensor: every element the sum of 1..size
        expected = torch.full_like(out, size * (size + 1) / 2)
    if not torch.equal(out, expected):
        raise SystemExit(f"{backend} {op}: wrong result on rank {rank}")


def caller(backend, group, op, sync):
    """A function ((input, output), calls) -> µs per call of `calls` blocking calls of `op` by `backend`."""
    if backend == "cxx":  # the C++ API, looped in C++
        import hiercoll_torch

        return lambda tensors, calls: hiercoll_torch._C._collective_calls(hiercoll_torch._backend_of(group), op,
                                                                         tensors[0], tensors[1], calls)
    if op == "all_reduce":
        one = lambda inp, out: dist.all_reduce(out, group=group)
    elif op == "broadcast":
        one = lambda inp, out: dist.broadcast(out, src=0, group=group)
    elif op == "all_gather_into_tensor":
        one = lambda inp, out: dist.all_gather_into_tensor(out, inp, group=group)
    else:
        one = lambda inp, out: dist.reduce_scatter_tensor(out, inp, group=group)

    def calls_through_dist(tensors, calls):
        inp, out = tensors
        t0 = time.perf_counter()
        for _ in range(calls):
            one(inp, out)
        sync()
        return (time.perf_counter() - t0) / calls * 1e6

    return calls_through_dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="hiercoll,gloo,fake")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--ops", default="all_reduce", help=f"comma-separated, of {', '.join(OPS)}")
    parser.add_argument("--sizes", default="8,1K,64K,1M",
                        help="bytes of the whole buffer, comma-separated (K, M suffixes)")
    parser.add_argument("--calls", type=int, default=1000,
                        help="calls per round up to 64 KB; fewer above, in proportion to the size (10 at least)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ops = args.ops.split(",")
    for op in ops:
        if op not in OPS:
            raise SystemExit(f"unknown op '{op}' (one of {', '.join(OPS)})")

    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29541")
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    # The default group only runs the benchmark's own barriers; each measured backend has a group of its own.
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    backends = args.backends.split(",")
    if "cxx" in backends and args.device != "cpu":
        raise SystemExit("the cxx probe runs on CPU tensors only")
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    groups = {b: make_group(b) for b in backends}
    recorded = {b: flight_recorded(g, b) for b, g in groups.items()}

    sizes = [parse_size(s) for s in args.sizes.split(",")]
    results = {}  # (op, bytes, backend): rank 0's µs per call, round by round
    for op in ops:
        callers = {b: caller(b, groups[b], op, sync) for b in backends}
        for nbytes in sizes:
            calls = max(10, args.calls * (64 << 10) // max(64 << 10, nbytes))
            tensors = make_tensors(op, nbytes, size, device)
            for backend in backends:  # the first call of each: a check, and the warm-up
                check_first_call(op, backend, callers[backend], tensors, rank, size)
                callers[backend](tensors, 20)
            for _ in range(args.rounds):
                for backend in backends:
                    for t in tensors:
                        t.zero_()  # sums of zeros stay zero however many calls run
                    dist.barrier()
                    sync()
                    results.setdefault((op, nbytes, backend), []).append(callers[backend](tensors, calls))

    # Every rank's rounds: a blocking collective goes at the pace of its slowest rank, and so does its floor. On a
    # shared machine one rank's core can run at half speed for a while (the no-op backend alone, one rank: 5.1-13 us
    # per call from one 10,000-call stretch to the next), so the floor of a round is its slowest rank's.
    keys = sorted(results)
    everyone = [None] * size
    dist.all_gather_object(everyone, [results[k] for k in keys])
    slowest = {k: [max(r[i][j] for r in everyone) for j in range(len(results[k]))] for i, k in enumerate(keys)}
    if rank == 0:
        for op in ops:
            print(f"# dist.{op}, float32, {size} rank(s), {args.device}: microseconds per call, median of "
                  f"{args.rounds} alternated rounds of {args.calls} calls (fewer above 64 KB); "
                  f"torch {torch.__version__}; flight recorder on: "
                  f"{', '.join(b for b in backends if recorded[b]) or 'none'}")
            print("bytes".rjust(10) + "".join(b.rjust(12) for b in backends))
            for nbytes in sizes:
                print(str(nbytes).rjust(10) +
                      "".join(f"{statistics.median(results[(op, nbytes, b)]):12.2f}" for b in backends))
        for (op, nbytes, backend), rounds in results.items():
            print(json.dumps({"op": op, "bytes": nbytes, "backend": backend, "device": args.device, "ranks": size,
                              "flight_recorder": recorded[backend],
                              "us_per_call": round(statistics.median(rounds), 3),
                              "rounds": [round(r, 3) for r in rounds],
                              "slowest_rank_rounds": [round(r, 3) for r in slowest[(op, nbytes, backend)]]}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
