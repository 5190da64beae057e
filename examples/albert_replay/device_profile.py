"""Records ALBERT's training step per layer call on an accelerator, in the replay's profile format.

    # on a GPU machine: ALBERT-base, bf16 autocast, 32 sequences of 128 tokens (the seeds' per-GPU batch)
    python examples/albert_replay/device_profile.py --config base --out examples/albert_replay/profiles/base.json
    # anywhere (a smoke test of the same code on the CPU, host clock)
    python examples/albert_replay/device_profile.py --device cpu --amp none --config tiny --batch 2 --out p.json

One rank, no communication: the model is transformers' AlbertForMaskedLM with ALBERT's parameter tensors (random
weights, vocabulary 30000, as replay.py builds it), trained with LAMB on random masked batches already on the device
(the data loader is not part of the profile: data_s is 0). step_profile.Recorder times every unit call's forward
and backward on the GPU's clock (CUDA events at the units' hooks: the GPU's time, not the launches'), over --steps
steps after --warmup ones. Then --profiler-steps more steps run under torch.profiler, as a second account of the
same step: the GPU's kernel time per step (operator_s) against the events' step, and the operators that take it
(`--profiler-table` writes torch.profiler's own table). The FLOPs the replay's FLOPs profile counts for this model
and batch are set beside the measured time: the achieved TFLOPS, and the utilisation of the GPU's peak where
--peak-tflops is given.

The JSON is step_profile's (units, optimizer_s, data_s, trace), plus "device" (the GPU's name), "amp", "torch",
"flops_per_step", "achieved_tflops", "profiler". replay.py --profile replays it.
"""
import argparse
import contextlib
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "albert_hf"))
import step_profile  # noqa: E402
from train import CONFIGS, build_model, make_optimizer  # noqa: E402

MASK_ID = 4  # ALBERT's SentencePiece vocabulary: <pad> 0, <unk> 1, [CLS] 2, [SEP] 3, [MASK] 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="base")
    p.add_argument("--vocab-size", type=int, default=30000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=32, help="sequences per step")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--amp", choices=["bf16", "none"], default="bf16", help="bf16 autocast (CUDA)")
    p.add_argument("--optimizer", choices=["lamb", "adamw"], default="lamb")
    p.add_argument("--warmup", type=int, default=5, help="steps before the recorded ones")
    p.add_argument("--steps", type=int, default=20, help="recorded steps")
    p.add_argument("--profiler-steps", type=int, default=3, help="steps under torch.profiler after the recorded ones")
    p.add_argument("--peak-tflops", type=float, help="the device's dense peak for --amp's precision, for the "
                                                     "utilisation")
    p.add_argument("--out", required=True, help="the profile JSON")
    p.add_argument("--profiler-table", help="write torch.profiler's operator table here")
    args = p.parse_args(argv)
    if args.amp != "none" and args.device != "cuda":
        raise SystemExit("--amp bf16 is for --device cuda")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA device")
    if args.steps < 1 or args.warmup < 0 or args.profiler_steps < 0:
        raise SystemExit("--steps must be at least 1, --warmup and --profiler-steps at least 0")
    return args


def masked_batches(count, batch, seq_len, vocab, device, seed=1):
    """`count` batches of random tokens with 15% of the positions masked, as the trainers' collator does: labels
    are the original token there and -100 (ignored) elsewhere."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        ids = torch.randint(5, vocab, (batch, seq_len), generator=g)
        masked = torch.rand(batch, seq_len, generator=g) < 0.15
        out.append({"input_ids": ids.masked_fill(masked, MASK_ID).to(device),
                    "attention_mask": torch.ones(batch, seq_len, dtype=torch.long, device=device),
                    "labels": ids.masked_fill(~masked, -100).to(device)})
    return out


def operator_s(profiler, steps, on_device):
    """The operators' time per step in a torch.profiler run, and the ten operators with the most of it. On the GPU:
    the kernels' (and copies') own time, summed over the device's events alone (an operator's self device time is
    its kernels' again), and the operators that launched the most; on the CPU, the operators' self time."""
    def device_us(e):
        us = getattr(e, "self_device_time_total", None)  # torch >= 2.4; the older name before
        return us if us is not None else getattr(e, "self_cuda_time_total", 0)

    def on_gpu(e):
        return "CUDA" in str(getattr(e, "device_type", ""))

    events = profiler.key_averages()
    if on_device:
        total = sum(device_us(e) for e in events if on_gpu(e))
        rows = [(e.key, device_us(e)) for e in events if not on_gpu(e) and device_us(e) > 0]
    else:
        rows = [(e.key, e.self_cpu_time_total) for e in events if e.self_cpu_time_total > 0]
        total = sum(us for _, us in rows)
    rows.sort(key=lambda r: -r[1])
    return total / 1e6 / steps, [[k, round(us / 1e6 / steps, 7)] for k, us in rows[:10]]


def profiler_account(step, steps, device, table_path):
    """`steps` more steps under torch.profiler: the wall time per step, the operators' time per step and the top
    ones; torch.profiler's own operator table to `table_path` if given."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    start = time.perf_counter()
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            step(i, record=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
    wall = (time.perf_counter() - start) / steps
    busy_s, top = operator_s(prof, steps, device.type == "cuda")
    if table_path:
        events = prof.key_averages()
        sort = "self_cpu_time_total"
        if device.type == "cuda":  # the name torch >= 2.4 gives it, else the older one
            sort = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
        with open(table_path, "w") as f:
            f.write(events.table(sort_by=sort, row_limit=40) + "\n")
    return {"steps": steps, "step_s": round(wall, 6), "operator_s": round(busy_s, 6), "top": top}


def main(args):
    torch.manual_seed(1)
    model = build_model(args.config, args.vocab_size, args.seq_len)
    # The FLOPs the replay's FLOPs profile would count for this model and batch (counted on the CPU, before the
    # model moves): beside the measured time, the throughput the GPU achieved.
    # A count that fails (another transformers release) costs the figure beside the profile, not the profile.
    try:
        flops = step_profile.from_flops(model, args.batch, args.seq_len, "a100", 1.0, 0.0)["flops_per_step"]
    except Exception as e:  # noqa: BLE001
        print(f"device_profile: FLOPs not counted: {e!r}", file=sys.stderr)
        flops = None
    device = torch.device(args.device)
    model = model.to(device)
    model.train()
    optimizer = make_optimizer(argparse.Namespace(optimizer=args.optimizer, weight_decay=0.01,
                                                  lr=1e-3 if args.optimizer == "lamb" else 1e-4), model)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.amp == "bf16" else contextlib.nullcontext()
    batches = masked_batches(4, args.batch, args.seq_len, args.vocab_size, device)
    clock = step_profile.CudaClock() if device.type == "cuda" else step_profile.WallClock()
    recorder = step_profile.Recorder(model, clock)

    def step(i, record):
        batch = batches[i % len(batches)]
        if record:
            recorder.forward_called()
        with amp:
            loss = model(**batch).loss
        if record:
            recorder.backward_started()
        loss.backward()
        backward_end = clock.now()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = clock.now()
        if record:
            clock.settle()
            recorder.step_done(optimizer_s=clock.seconds(end) - clock.seconds(backward_end), data_s=0.0,
                               step_s=clock.seconds(end) - clock.seconds(recorder.forward_call))
        return loss

    for i in range(args.warmup + args.steps):
        loss = step(i, record=True)
    recorder.close()
    profile = recorder.profile(skip=args.warmup, config=args.config, vocab_size=args.vocab_size,
                               seq_len=args.seq_len, batch=args.batch)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    compute_s = step_profile.compute_s(profile)
    profile.update(source=f"recorded on {name} by device_profile.py ({args.amp} autocast, {args.optimizer})",
                   device=name, amp=args.amp, optimizer=args.optimizer, torch=torch.__version__,
                   final_loss=round(loss.item(), 4), flops_per_step=flops,
                   achieved_tflops=round(flops / compute_s / 1e12, 2) if flops else None)
    if args.peak_tflops and flops:
        profile["utilisation"] = round(flops / compute_s / 1e12 / args.peak_tflops, 4)

    step_profile.save(profile, args.out)  # the profile is kept whatever the second account below meets
    if args.profiler_steps:
        try:
            profile["profiler"] = profiler_account(step, args.profiler_steps, device, args.profiler_table)
            step_profile.save(profile, args.out)
        except Exception as e:  # noqa: BLE001 (another torch release's profiler API: the profile stands without it)
            print(f"device_profile: torch.profiler's account failed: {e!r}", file=sys.stderr)
    units = step_profile.by_kind(profile)  # the shared layer's calls as one line
    print(json.dumps({"summary": True, "device": name, "config": args.config, "batch": args.batch,
                      "compute_ms": round(compute_s * 1e3, 3),
                      "step_ms": round(profile["recorded_step_s"] * 1e3, 3),
                      "units_ms": {k: [round(v * 1e3, 3) for v in fb] for k, fb in units.items()},
                      "achieved_tflops": profile["achieved_tflops"], "profiler": profile.get("profiler")}),
          flush=True)


if __name__ == "__main__":
    main(parse_args())
