"""The same ALBERT masked-LM pretraining through Hugging Face's Trainer, on a hiercoll process group.

    torchrun --nproc-per-node 2 examples/albert_hf/train_trainer.py --corpus kjv.txt --backend hiercoll

The recipe: initialise the process group yourself, before TrainingArguments. Trainer hands distributed set-up
to accelerate, which creates a group only when none exists (accelerate/state.py: `if not
torch.distributed.is_initialized()`) and otherwise wraps the model in DDP over the default group, the one made
here. `ddp_backend="hiercoll"` is no substitute: on CPUs accelerate replaces any backend but mpi with gloo, and
TrainingArguments' command-line parser only accepts the backends it knows.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

import albert_data
import comm
from train import CONFIGS, build_model, release_ddp_then_destroy_group


class Tokenised(torch.utils.data.Dataset):
    """Segments tokenised when fetched (Trainer's loader brings its own sampler and collator)."""

    def __init__(self, segments, tokenizer, seq_len):
        self.segments, self.tokenizer, self.seq_len = segments, tokenizer, seq_len

    def __len__(self):
        return len(self.segments)

    def __getitem__(self, i):
        return albert_data.encode(self.tokenizer, self.segments[i], self.seq_len)


class LossLog(TrainerCallback):
    """Keeps Trainer's logged losses so the summary can report them."""

    def __init__(self):
        self.losses = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.losses.append(logs["loss"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--corpus", required=True)
    p.add_argument("--tokenizer", help="SentencePiece model directory, trained if missing (default OUT/tokenizer)")
    p.add_argument("--vocab-size", type=int, default=4000)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="per_device_train_batch_size")
    p.add_argument("--steps", type=int, default=100, help="max_steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--backend", choices=["hiercoll", "gloo", "nccl"], default="hiercoll")
    p.add_argument("--num-workers", type=int, default=0, help="dataloader_num_workers")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="albert-trainer-out")
    p.add_argument("--save-model", action="store_true", help="write rank's final weights to OUT/weights.RANK.pt")
    p.add_argument("--group-by", choices=["us", "trainer"], default="us",
                   help="who creates the process group: this script before Trainer (the recipe), or Trainer "
                        "itself from TrainingArguments(ddp_backend=...) (GPUs only; torchrun's variables)")
    args = p.parse_args()
    if args.group_by == "trainer" and args.device == "cpu" and args.backend != "gloo":
        raise SystemExit("--group-by trainer works on GPUs only: on CPUs accelerate replaces any ddp_backend but mpi "
                         "with gloo; use the default --group-by us")

    # 1. The process group first: accelerate (under Trainer) then uses it instead of making its own.
    if args.group_by == "us":
        comm.init_process_group(args.backend)
    else:
        import hiercoll_torch  # noqa: F401  (registers the backend name for accelerate's init_process_group)

    tokenizer_dir = args.tokenizer or os.path.join(args.out, "tokenizer")
    # Without a group yet (--group-by trainer) every rank loads it alone, and trains its own copy if it is missing
    # (each renamed into place whole): give --tokenizer a trained one.
    load = albert_data.shared_tokenizer if args.group_by == "us" else albert_data.load_tokenizer
    tokenizer = load(tokenizer_dir, args.corpus, args.vocab_size)
    segments = albert_data.read_segments(args.corpus, args.seq_len)

    torch.manual_seed(args.seed)
    model = build_model(args.config, len(tokenizer), args.seq_len)
    # 2. Trainer as usual.
    training_args = TrainingArguments(
        output_dir=args.out, per_device_train_batch_size=args.batch, max_steps=args.steps, learning_rate=args.lr,
        warmup_steps=max(1, args.steps // 10), lr_scheduler_type="linear", weight_decay=0.01, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=args.device == "cpu", dataloader_num_workers=args.num_workers,
        seed=args.seed, bf16=args.device == "cuda", disable_tqdm=True, ddp_find_unused_parameters=False,
        ddp_backend=args.backend if args.group_by == "trainer" else None)
    log = LossLog()
    trainer = Trainer(model=model, args=training_args, train_dataset=Tokenised(segments, tokenizer, args.seq_len),
                      data_collator=DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15),
                      callbacks=[log])
    result = trainer.train()

    # Which group DDP averaged over: the proof that Trainer used ours.
    ddp = trainer.model_wrapped
    group_backend = dist.get_backend(getattr(ddp, "process_group", None))
    rank = dist.get_rank()
    if args.save_model:
        torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()},
                   os.path.join(args.out, f"weights.{rank}.pt"))
    if rank == 0:
        print(json.dumps({"summary": True, "trainer": True, "ddp": type(ddp).__name__, "group_backend": group_backend,
                          "ranks": dist.get_world_size(), "steps": result.global_step, "losses": log.losses,
                          "samples_per_s": result.metrics.get("train_samples_per_second")}), flush=True)
    if isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
        release_ddp_then_destroy_group(ddp)  # Trainer's DDP before the group (see there)
    else:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
