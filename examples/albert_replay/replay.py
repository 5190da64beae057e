"""DDP step replay: real DistributedDataParallel over the real backend, around ALBERT's exact parameter tensors, with
the compute replaced by sleeps from a profile, optionally time-dilated.

    # the seeds' regime: ALBERT-base on p4d's A100s, gradients averaged over 2 ranks (see scripts/study/replay-study)
    torchrun --nproc-per-node 2 examples/albert_replay/replay.py --config base --accelerator a100 --dilation 400
    # a profile recorded from the real CPU trainer (examples/albert_hf/train.py --profile-out)
    torchrun --nproc-per-node 2 examples/albert_replay/replay.py --profile build/cpu-profile.json --dilation 1

On an accelerator a step takes tens of milliseconds and the CPUs are free for communication; here every rank shares
two cores. Sleeping costs no CPU, so the replay puts many ranks on them while the communication is real: DDP's
Reducer, its buckets, its hooks and the backend's allreduce run as they would, and backward hands DDP each
parameter's gradient when a GPU would (after the backward of the parameter's first call in forward order: see
step_profile.py). Dilation D multiplies every compute time by D; the study divides the link rate by D, so the
ratios are those of the real cluster. The summary reports times divided by D ("undilated").

One JSON line per step on rank 0's stdout; the last has "summary": true.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "albert_hf"))
import comm  # noqa: E402  (examples/albert_hf: the backends and the averaging hook)
import step_profile  # noqa: E402
from train import CONFIGS, build_model, release_ddp_then_destroy_group  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--profile", help="a profile JSON (step_profile.py; {rank} in the name: each rank its own); "
                                     "without it, one from FLOPs (--accelerator)")
    p.add_argument("--config", choices=sorted(CONFIGS), default="base")
    p.add_argument("--vocab-size", type=int, default=30000, help="ALBERT's 30000 (the profile's when it has one)")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=32, help="sequences per rank and step")
    p.add_argument("--accelerator", choices=sorted(step_profile.PEAK_TFLOPS), default="a100")
    p.add_argument("--mfu", type=float, default=0.35, help="model FLOPs utilisation of the accelerator's peak")
    p.add_argument("--optimizer-ms", type=float, default=1.0, help="optimizer step on the accelerator (FLOPs profile)")
    p.add_argument("--compute-scale", type=float, default=1.0,
                   help="multiply a recorded profile's times by this (another accelerator's speed: "
                        "step_profile.scaled)")
    p.add_argument("--dilation", type=float, default=1.0, help="compute times multiplied by this (links divided by "
                                                               "it outside: scripts/emulation/cluster)")
    p.add_argument("--steps", type=int, default=6, help="steps; the first (DDP's bucket rebuild) is not timed")
    p.add_argument("--backend", choices=comm.BACKENDS, default="hiercoll")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--label", default="", help="free text copied into the summary")
    p.add_argument("--write-profile", help="write the profile used to this file (rank 0) and go on")
    args = p.parse_args(argv)
    if args.steps < 2:
        raise SystemExit("--steps must be at least 2 (the first is not timed)")
    if args.dilation <= 0:
        raise SystemExit("--dilation must be positive")
    if args.compute_scale <= 0 or (args.compute_scale != 1.0 and not args.profile):
        raise SystemExit("--compute-scale must be positive, and is for a recorded profile (--profile)")
    return args


class Unit:
    """One call of a profile: its (dilated) times, the parameters it uses, and the gradients it hands autograd."""

    def __init__(self, spec, parameters, grads, dilation):
        self.name = spec["name"]
        self.dilation = dilation
        self.set_times(spec["forward_s"], spec["backward_s"])
        self.parameters = [parameters[n] for n in spec["params"]]
        self.grads = [grads.get(n) for n in spec["params"]]  # None: another call hands this one over

    def set_times(self, forward_s, backward_s):
        self.forward_s, self.backward_s = forward_s * self.dilation, backward_s * self.dilation


class SleepThrough(torch.autograd.Function):
    """A unit's compute as sleeps (time.sleep releases the GIL and costs no CPU)."""

    @staticmethod
    def forward(ctx, x, unit, *parameters):
        time.sleep(unit.forward_s)
        ctx.unit = unit
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        time.sleep(ctx.unit.backward_s)
        return (grad, None, *ctx.unit.grads)


class ReplayModel(torch.nn.Module):
    """Holds the real model, so DDP sees its parameters (and buffers) exactly, registered in the same order; its
    forward sleeps through the profile's units instead of computing."""

    def __init__(self, model, profile, dilation, grad_value):
        super().__init__()
        self.model = model
        parameters = dict(model.named_parameters())
        missing = set(parameters) - {n for u in profile["units"] for n in u["params"]}
        unknown = {n for u in profile["units"] for n in u["params"]} - set(parameters)
        if missing or unknown:
            raise SystemExit(f"the profile does not match the model: parameters in no unit {sorted(missing)}, "
                             f"unknown to the model {sorted(unknown)}")
        self.grads = {n: torch.full_like(p, grad_value) for n, p in parameters.items()}
        # Only a parameter's first call in forward order (its last in backward) returns its gradient: on a GPU the
        # gradient is complete then, the later calls' parts summed into it before.
        first_use = {}
        for i, spec in enumerate(profile["units"]):
            for n in spec["params"]:
                first_use.setdefault(n, i)
        self.units = [Unit(spec, parameters, {n: self.grads[n] for n in spec["params"] if first_use[n] == i}, dilation)
                      for i, spec in enumerate(profile["units"])]

    def set_step(self, step):
        """A recorded step's own times (a trace), instead of the mean."""
        for unit, (forward_s, backward_s) in zip(self.units, step["units"]):
            unit.set_times(forward_s, backward_s)

    def forward(self, x):
        for unit in self.units:
            x = SleepThrough.apply(x, unit, *unit.parameters)
        return x.sum()


def main(args):
    torch.set_num_threads(1)
    averager = comm.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    if args.profile:
        profile = step_profile.load(args.profile.format(rank=rank))
        if args.compute_scale != 1.0:
            profile = step_profile.scaled(profile, args.compute_scale)
        config = profile.get("config", args.config)
        vocab, seq_len, batch = (profile.get(k, d) for k, d in (("vocab_size", args.vocab_size),
                                                                 ("seq_len", args.seq_len), ("batch", args.batch)))
        torch.manual_seed(1)
        model = build_model(config, vocab, seq_len)
    else:
        config, vocab, seq_len, batch = args.config, args.vocab_size, args.seq_len, args.batch
        torch.manual_seed(1)
        model = build_model(config, vocab, seq_len)
        profile = step_profile.from_flops(model, batch, seq_len, args.accelerator, args.mfu, args.optimizer_ms / 1e3)
        profile.update(config=config, vocab_size=vocab, seq_len=seq_len, batch=batch)
    if args.write_profile and rank == 0:
        step_profile.save(profile, args.write_profile)

    D = args.dilation
    replay = ReplayModel(model, profile, D, grad_value=float(rank + 1))
    ddp = DDP(replay, bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True)
    handovers = []  # (time, bytes) of each bucket DDP hands to the backend, this step

    def timed_hook(state, bucket):
        handovers.append((time.perf_counter(), bucket.buffer().numel() * bucket.buffer().element_size()))
        return comm.averaging_hook(state, bucket)

    ddp.register_comm_hook(averager, timed_hook)
    parameters = list(model.parameters())
    expected = (world + 1) / 2  # the average of the ranks' gradients, rank r's all r + 1
    compute_s = step_profile.compute_s(profile)
    token = torch.zeros(1)

    trace = profile.get("trace")
    steps = []
    for step in range(args.steps):
        times = profile
        if trace:
            times = trace[step % len(trace)]
            replay.set_step(times)
        t0 = time.perf_counter()
        time.sleep(times["data_s"] * D)
        t_data = time.perf_counter()
        loss = ddp(token)
        handovers.clear()
        t_forward = time.perf_counter()
        loss.backward()
        comm_wait = averager.exposed_wait(time.perf_counter())
        t_backward = time.perf_counter()
        # No data silently wrong: every gradient is the average DDP was to make (first and last element of each).
        for p in parameters:
            g = p.grad.view(-1)
            if g[0].item() != expected or g[-1].item() != expected:
                raise RuntimeError(f"step {step}: gradient of a {tuple(p.shape)} parameter is {g[0].item()} .. "
                                   f"{g[-1].item()}, not the average {expected}")
        time.sleep(times["optimizer_s"] * D)
        for p in parameters:
            p.grad = None
        t1 = time.perf_counter()
        steps.append({"step_s": t1 - t0, "comm_wait_s": comm_wait, "data_s": t_data - t0,
                      "forward_backward_s": t_backward - t_data})
        # When each bucket left, from the start of backward, and its size: how much of backward it can hide under.
        buckets = [[round((t - t_forward) / D * 1e3, 3), round(size / 2**20, 2)] for t, size in handovers]
        if rank == 0:
            print(json.dumps({"step": step + 1, **{k: round(v / D, 6) for k, v in steps[-1].items()}}), flush=True)

    timed = steps[1:]  # means, as a trainer's throughput is
    step_s = statistics.mean(s["step_s"] for s in timed) / D
    wait_s = statistics.mean(s["comm_wait_s"] for s in timed) / D
    if rank == 0:
        print(json.dumps({
            "summary": True, "backend": averager.name, "algo": os.environ.get("HIERCOLL_ALGO", ""),
            "label": args.label, "ranks": world, "config": config, "parameters": sum(p.numel() for p in parameters),
            "gradient_mb": round(sum(p.numel() * p.element_size() for p in parameters) / 2**20, 2),
            "batch": batch, "seq_len": seq_len, "profile": profile["source"] + (" (its trace)" if trace else ""),
            "dilation": D,
            "steps_timed": len(timed), "compute_s": round(compute_s + profile["data_s"], 6),
            "step_s": round(step_s, 6), "comm_wait_s": round(wait_s, 6),
            "step_s_all": [round(s["step_s"] / D, 6) for s in timed],
            "backward_compute_ms": round(sum(u.backward_s for u in replay.units) / D * 1e3, 3),
            "bucket_handover_ms_mb": buckets,
            "samples_per_s": round(batch * world / step_s, 2)}), flush=True)
    release_ddp_then_destroy_group(ddp)


if __name__ == "__main__":
    main(parse_args())
    sys.exit(0)
