"""ALBERT masked-LM pretraining with Hugging Face transformers, data-parallel with DDP over --backend.

    # 2 ranks on this host (torchrun's variables; mpirun and srun work too, see README.md)
    torchrun --nproc-per-node 2 examples/albert_hf/train.py --corpus kjv.txt --backend hiercoll --steps 300

The model is transformers' AlbertForMaskedLM built from an AlbertConfig (nothing downloaded); the tokenizer a
SentencePiece model trained on the corpus, loaded as AlbertTokenizer. One JSON object per log line on stdout (rank 0)
and in OUT/log.jsonl; the last line has "summary": true.
"""
import argparse
import contextlib
import gc
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AlbertConfig, AlbertForMaskedLM, get_linear_schedule_with_warmup

import albert_data
import comm
from lamb import Lamb

CONFIGS = {
    # ALBERT-base (Lan et al., 2019): factorised embedding E=128, H=768, one layer shared 12 times.
    "base": dict(embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072),
    # ALBERT-large: H=1024, one layer shared 24 times, 16 heads (examples/albert_replay replays it).
    "large": dict(embedding_size=128, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096),
    # The same shape scaled down for CPUs (as examples/albert_mlm's tiny).
    "tiny": dict(embedding_size=128, hidden_size=128, num_hidden_layers=4, num_attention_heads=2,
                 intermediate_size=512),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--corpus", required=True, help="text, one document per line")
    p.add_argument("--tokenizer", help="directory of the SentencePiece model (spiece.model); trained on the corpus "
                                       "if missing (default OUT/tokenizer-VOCAB)")
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="sequences per rank and micro-step")
    p.add_argument("--accum", type=int, default=1, help="micro-steps per optimizer step (gradient accumulation)")
    p.add_argument("--steps", type=int, default=300, help="optimizer steps")
    p.add_argument("--examples", type=int, help="train on this many sequences in all, whatever the number of "
                                                "ranks (sets --steps; the seeds' same-examples-at-every-scale rule)")
    p.add_argument("--lr", type=float, help="peak learning rate (default 1e-2 for LAMB, 1e-3 for AdamW)")
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up: a fraction of the steps, or steps if >= 1")
    p.add_argument("--optimizer", choices=["lamb", "adamw"], default="lamb")
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--backend", choices=comm.BACKENDS, default="hiercoll")
    p.add_argument("--interleave", choices=["hiercoll", "gloo", "nccl"],
                   help="average every other step's gradients with this backend instead (a second group and DDP "
                        "wrapper over the same model): two backends timed in one run, step by step, so that the "
                        "machine's drift between runs does not enter their ratio; one summary line each")
    p.add_argument("--bucket-mb", type=float, default=25.0, help="DDP gradient bucket size (bucket_cap_mb)")
    p.add_argument("--num-workers", type=int, default=0, help="DataLoader worker processes (0: the training one)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--amp", choices=["none", "bf16"], default="none", help="bf16 autocast (CUDA)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="albert-hf-out", help="log, tokenizer, checkpoint")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: at the end)")
    p.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if present")
    p.add_argument("--stop-after", type=int, help="leave with a checkpoint after this step, as a preempted job would")
    p.add_argument("--label", default="", help="free text copied into the summary (the study names its runs)")
    p.add_argument("--profile-out", help="record each step's compute per layer call and write the median profile "
                                         "here at the end ({rank} in the name: one file per rank): what "
                                         "examples/albert_replay replays")
    p.add_argument("--timeline-out", help="write each step's wall-clock times of the last bucket's hand-over and of "
                                           "backward's end here at the end, {rank} in the name (one file per "
                                           "rank); examples/albert_hf/timeline.py lines the ranks up")
    args = p.parse_args(argv)
    if args.timeline_out and "{rank}" not in args.timeline_out:
        raise SystemExit("--timeline-out needs {rank} in the name (one file per rank)")
    for name in ("batch", "accum", "steps", "seq_len", "vocab_size", "log_every", "threads"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    if args.lr is None:
        args.lr = 1e-2 if args.optimizer == "lamb" else 1e-3
    if args.num_workers < 0:
        raise SystemExit("--num-workers must be 0 or more")
    if args.amp != "none" and args.device != "cuda":
        raise SystemExit("--amp bf16 is for --device cuda")
    if args.interleave == args.backend:
        raise SystemExit("--interleave names the backend --backend already runs")
    if args.interleave and (args.profile_out or args.resume or args.stop_after):
        raise SystemExit("--interleave is for timing: not with --profile-out, --resume or --stop-after")
    if args.profile_out and args.accum != 1:
        raise SystemExit("--profile-out records one forward and backward per step: use --accum 1")
    return args


def build_model(name, vocab_size, seq_len):
    config = AlbertConfig(vocab_size=vocab_size, max_position_embeddings=max(512, seq_len),
                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **CONFIGS[name])
    return AlbertForMaskedLM(config)


def make_optimizer(args, model):
    # No weight decay on biases and LayerNorm, as BERT and ALBERT.
    decay, no_decay = [], []
    for p in model.parameters():
        (no_decay if p.ndim == 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "lamb":
        return Lamb(groups, lr=args.lr)
    return torch.optim.AdamW(groups, lr=args.lr, eps=1e-6)


class Log:
    """JSON lines on rank 0's stdout and in OUT/log.jsonl."""

    def __init__(self, path, enabled):
        self.file = open(path, "a") if enabled else None  # a resumed run appends

    def write(self, **record):
        if self.file is None:
            return
        line = json.dumps(record)
        print(line, flush=True)
        self.file.write(line + "\n")
        self.file.flush()


def train(args):
    torch.set_num_threads(args.threads)
    averagers = [comm.init_process_group(args.backend)]
    if args.interleave:
        averagers.append(comm.new_group(args.interleave))
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.device == "cuda":
        torch.cuda.set_device(comm.local_rank())
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "log.jsonl"), rank == 0)

    tokenizer = albert_data.shared_tokenizer(args.tokenizer or os.path.join(args.out, f"tokenizer-{args.vocab_size}"),
                                             args.corpus, args.vocab_size)
    segments = albert_data.read_segments(args.corpus, args.seq_len)

    torch.manual_seed(args.seed)  # the same initial weights on every rank (DDP broadcasts rank 0's anyway)
    model = build_model(args.config, len(tokenizer), args.seq_len).to(device)
    recorder = None
    if args.profile_out:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "albert_replay"))
        import step_profile
        recorder = step_profile.Recorder(model)
    # One DDP wrapper per backend over the same model. A wrapper's reducer acts on a backward only after its own
    # forward has prepared it, so with --interleave each step's gradients go through the wrapper that ran forward.
    wrappers = []
    for averager in averagers:
        wrappers.append(DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                            bucket_cap_mb=args.bucket_mb, gradient_as_bucket_view=True,
                            process_group=averager.group))
        wrappers[-1].register_comm_hook(averager, comm.averaging_hook)
    optimizer = make_optimizer(args, model)

    per_step = args.batch * world * args.accum
    steps = math.ceil(args.examples / per_step) if args.examples else args.steps
    warmup = int(args.warmup) if args.warmup >= 1 else int(args.warmup * steps)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, steps)

    start = 0
    checkpoint_path = os.path.join(args.out, "checkpoint.pt")
    if args.resume and os.path.exists(checkpoint_path):
        start = load_checkpoint(checkpoint_path, args, world, model, optimizer, scheduler)

    loader = torch.utils.data.DataLoader(
        albert_data.Segments(segments, tokenizer, args.seq_len),
        batch_sampler=albert_data.ShardedBatches(len(segments), args.batch, rank, world, args.seed,
                                                 start=start * args.accum),
        collate_fn=albert_data.SeededMasking(tokenizer, args.seed, rank),
        num_workers=args.num_workers, pin_memory=device.type == "cuda")
    batches = iter(loader)
    amp = torch.autocast("cuda", dtype=torch.bfloat16) if args.amp == "bf16" else contextlib.nullcontext()
    parameters = sum(p.numel() for p in model.parameters())

    # Per-interval sums, averaged over the ranks when logged: loss, correct predictions, predictions, micro-steps.
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # on the device: no sync per step
    interval = {"t": time.perf_counter(), "comm": 0.0, "data": 0.0, "steps": 0}
    # Throughput is timed from the end of the first step (start-up and the loader's first batches excluded): each
    # later step from the previous one's end to its own, on the clock of the backend that averaged it.
    timed = [{"steps": 0, "seconds": 0.0, "squares": 0.0, "comm": 0.0, "data": 0.0} for _ in averagers]
    previous_end = None
    last_loss = float("nan")
    timeline = []  # --timeline-out: per step, when the last bucket was handed over and when backward ended
    for step in range(start, steps):
        lane = step % len(wrappers)
        ddp, averager = wrappers[lane], averagers[lane]
        comm_wait = data_wait = 0.0
        step_start = time.perf_counter()
        for micro in range(args.accum):
            t0 = time.perf_counter()
            batch = {k: v.to(device, non_blocking=True) for k, v in next(batches).items()}
            data_wait += time.perf_counter() - t0
            last = micro == args.accum - 1
            with (contextlib.nullcontext() if last else ddp.no_sync()), amp:
                if recorder:
                    recorder.forward_called()
                out = ddp(**batch)
                loss = out.loss / args.accum
            if recorder:
                recorder.backward_started()
            loss.backward()
            if last:
                if device.type == "cuda":
                    torch.cuda.synchronize()
                backward_end = time.perf_counter()
                comm_wait = averager.exposed_wait(backward_end)
                if args.timeline_out:
                    timeline.append({"step": step, "backend": averager.name,
                                     "handover": averager.last_handover_wall, "backward_end": time.time()})
            with torch.no_grad():
                masked = batch["labels"] != -100
                correct = (out.logits.argmax(-1)[masked] == batch["labels"][masked]).sum()
                sums += torch.stack([out.loss.detach().double(), correct.double(), masked.sum().double(),
                                     torch.ones((), dtype=torch.float64, device=device)])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if recorder:  # after backward: the metrics and the optimizer; before it, the batch
            now = time.perf_counter()
            recorder.step_done(optimizer_s=now - backward_end, data_s=data_wait, step_s=now - step_start,
                               comm_wait_s=comm_wait)
        interval["comm"] += comm_wait
        interval["data"] += data_wait
        interval["steps"] += 1
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            # The waits too, averaged over the ranks: one rank's comm wait alone says mostly how often that rank
            # reached the allreduce first and waited for the others' compute, which on shared cores is the
            # scheduler's doing more than the backend's.
            totals = torch.cat([sums, torch.tensor([interval["comm"], interval["data"]], dtype=torch.float64,
                                                   device=sums.device)])
            dist.all_reduce(totals)
            totals = totals.cpu()
            interval["comm"], interval["data"] = (totals[4] / world).item(), (totals[5] / world).item()
            elapsed = time.perf_counter() - interval["t"]
            last_loss = (totals[0] / totals[3]).item()
            log.write(step=step + 1, loss=round(last_loss, 6), mlm_accuracy=round((totals[1] / totals[2]).item(), 5),
                      lr=scheduler.get_last_lr()[0], samples_per_s=round(interval["steps"] * per_step / elapsed, 2),
                      comm_wait_s=round(interval["comm"], 4), data_wait_s=round(interval["data"], 4))
            sums.zero_()
            interval = {"t": time.perf_counter(), "comm": 0.0, "data": 0.0, "steps": 0}
        done = step + 1 == steps or (args.stop_after is not None and step + 1 >= args.stop_after)
        if done or (args.checkpoint_every and (step + 1) % args.checkpoint_every == 0):
            save_checkpoint(checkpoint_path, args, world, step + 1, model, optimizer, scheduler)
        end = time.perf_counter()
        if previous_end is not None:
            clock = timed[lane]
            clock["steps"] += 1
            clock["seconds"] += end - previous_end
            clock["squares"] += (end - previous_end) ** 2
            clock["comm"] += comm_wait
            clock["data"] += data_wait
        previous_end = end
        if done:
            break

    waits = torch.tensor([[c["comm"], c["data"]] for c in timed], dtype=torch.float64, device=sums.device)
    dist.all_reduce(waits)  # the summary's waits are the ranks' average, as the log's
    for clock, (comm_s, data_s) in zip(timed, (waits / world).tolist()):
        clock["comm"], clock["data"] = comm_s, data_s
    if recorder and (rank == 0 or "{rank}" in args.profile_out):
        step_profile.save(recorder.profile(config=args.config, vocab_size=len(tokenizer), seq_len=args.seq_len,
                                           batch=args.batch, ranks=world, rank=rank, backend=args.backend),
                          args.profile_out.format(rank=rank))
    # One summary per backend (the last is --backend's); with --interleave each gives the steps it averaged,
    # "steps" the run's.
    interleaved = [a.name for a in averagers] if args.interleave else None
    for averager, ddp, clock in reversed(list(zip(averagers, wrappers, timed))):
        log.write(summary=True, backend=averager.name, label=args.label, ranks=world, config=args.config,
                  parameters=parameters, steps=step + 1, global_batch=per_step,
                  examples=(step + 1 - start) * per_step, num_workers=args.num_workers,
                  final_loss=round(last_loss, 6), interleaved=interleaved, timed_steps=clock["steps"],
                  samples_per_s=round(clock["steps"] * per_step / clock["seconds"], 3) if clock["steps"] else None,
                  comm_wait_s=round(clock["comm"], 4), data_wait_s=round(clock["data"], 4),
                  seconds=round(clock["seconds"], 3), step_s_sd=round(step_sd(clock), 5), allreduces=averager.calls,
                  buckets=bucket_algorithms(ddp, averager))
    if args.timeline_out:
        with open(args.timeline_out.format(rank=rank), "w") as f:
            json.dump({"rank": rank, "backend": averagers[0].name, "steps": timeline}, f)
    del batches  # stops the loader's workers before the group goes
    release_ddp_then_destroy_group(*wrappers)


def step_sd(clock):
    """The standard deviation of one backend's timed steps (this rank's): how far a run's throughput can be trusted."""
    n = clock["steps"]
    if n < 2:
        return 0.0
    return math.sqrt(max(0.0, (clock["squares"] - clock["seconds"] ** 2 / n) / (n - 1)))


def bucket_algorithms(ddp, averager):
    """DDP's gradient buckets as it last built them, [bytes, algorithm] each: the allreduce hiercoll picks for that
    size (None for other backends), so that a study's row can be read against the algorithm behind it."""
    sizes = [int(s) for s in str(ddp._get_ddp_logging_data().get("bucket_sizes", "")).split(",") if s.strip()]
    if averager.name != "hiercoll":
        return [[size, None] for size in sizes]
    import hiercoll_torch

    return [[size, hiercoll_torch.allreduce_algorithm(size, averager.group)] for size in sizes]


def release_ddp_then_destroy_group(*wrappers):
    """Frees the DDP wrappers before the process group. DDP's reducer holds the group from C++ and is freed with the
    GIL held; if it held the last reference, gloo's destructor would join worker threads that may be waiting for the
    GIL to free a finished collective's tensors, and the process would hang at exit (pytorch/pytorch#56297; seen here
    once in ~20 gloo runs). The group's Python object releases the GIL when it goes, so it must go last."""
    for ddp in wrappers:
        ddp.reducer = ddp.logger = None  # the logger holds the reducer too
    gc.collect()
    dist.destroy_process_group()


# What must match for a checkpoint to continue the same run: the data order and masks depend on these.
RESUME_KEYS = ("config", "batch", "accum", "seed", "seq_len", "vocab_size", "optimizer")


def save_checkpoint(path, args, world, step, model, optimizer, scheduler):
    if dist.get_rank() == 0:
        state = {"step": step, "world": world, "args": {k: getattr(args, k) for k in RESUME_KEYS},
                 "model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
        torch.save(state, path + ".tmp")
        os.replace(path + ".tmp", path)  # a crash mid-write leaves the previous checkpoint
    dist.barrier()


def load_checkpoint(path, args, world, model, optimizer, scheduler):
    state = torch.load(path, map_location="cpu", weights_only=False)
    saved = dict(state["args"], world=state["world"])
    wanted = dict({k: getattr(args, k) for k in RESUME_KEYS}, world=world)
    differ = {k: (saved[k], wanted[k]) for k in wanted if saved.get(k) != wanted[k]}
    if differ:
        raise SystemExit(f"{path} was written by a different run ({differ}, as (checkpoint, now)): it cannot be "
                         "continued exactly; start afresh or use the same settings")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    return state["step"]


if __name__ == "__main__":
    train(parse_args())
    sys.exit(0)
