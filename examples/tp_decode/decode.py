"""Tensor-parallel greedy decoding on CPUs, where every token waits on small allreduces: a Llama-style causal LM from
Hugging Face transformers (random weights, no download) sharded with plain DTensor over the ranks, then `generate`.

    # 2 ranks, any backend torch knows (hiercoll once hiercoll_torch is importable)
    torchrun --nproc-per-node 2 examples/tp_decode/decode.py --backend hiercoll --hidden 1024
    # the compute-only bound: the same sharded model, rank 0 alone, collectives that do nothing
    python examples/tp_decode/decode.py --backend fake --ranks 2 --hidden 1024

Per layer, q/k/v and gate/up are split column-wise and o/down row-wise (Megatron's layout): two allreduces of one
token's hidden state per layer and token, 8 B .. 8 KB each. One thread per rank (the cores are the ranks'). Prints
one JSON line: tokens/s of `generate` (greedy, KV cache) after a warm-up, and the tokens, which every backend that
computes the sums must give alike.
"""
import argparse
import datetime
import json
import os
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def build_model(hidden, layers, seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 64 * 64, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64, vocab_size=32000,
                         max_position_embeddings=1024, tie_word_embeddings=False)
    torch.manual_seed(seed)  # the same weights on every rank, before each keeps its shard
    return LlamaForCausalLM(config).eval()


def shard(model, mesh):
    plan = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}
    for layer in model.model.layers:
        parallelize_module(layer, mesh, plan)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="hiercoll")
    parser.add_argument("--ranks", type=int, default=2, help="with --backend fake: the group size to pretend")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true",
                        help="print torch.profiler's table of the timed generate (every rank): where a token's time goes")
    args = parser.parse_args()
    torch.set_num_threads(1)

    if args.backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=args.ranks)
    else:
        if args.backend == "hiercoll":
            import hiercoll_torch  # noqa: F401  (registers the backend)
        dist.init_process_group(args.backend, timeout=datetime.timedelta(seconds=300))
    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
    model = shard(build_model(args.hidden, args.layers, args.seed), mesh["tp"])

    generator = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=generator)
    with torch.inference_mode():
        model.generate(prompt, max_new_tokens=4, do_sample=False)  # warm-up: allocations, first calls
        dist.barrier() if args.backend != "fake" else None
        profiler = None
        if args.profile:
            from torch.profiler import ProfilerActivity, profile
            profiler = profile(activities=[ProfilerActivity.CPU])
            profiler.__enter__()
        start = time.perf_counter()
        output = model.generate(prompt, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                                do_sample=False)
        seconds = time.perf_counter() - start
        if profiler is not None:
            profiler.__exit__(None, None, None)
            table = profiler.key_averages().table(sort_by="cpu_time_total", row_limit=12, max_name_column_width=40)
            print(f"# rank {rank}, {args.backend}\n{table}", flush=True)
    tokens = output[0, args.prompt:].tolist()
    if rank == 0:
        print(json.dumps({"summary": True, "backend": args.backend, "ranks": size, "hidden": args.hidden,
                          "layers": args.layers, "new_tokens": len(tokens), "seconds": round(seconds, 4),
                          "tokens_per_s": round(len(tokens) / seconds, 3), "tokens": tokens}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
