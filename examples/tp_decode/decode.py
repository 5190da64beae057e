"""Tensor-parallel greedy decoding on CPUs, where every token waits on small allreduces: a Llama-style causal LM from
Hugging Face transformers (random weights, no download) sharded with plain DTensor over the ranks, then `generate`.

    # 2 ranks, any backend torch knows (hiercoll once hiercoll_torch is importable)
    torchrun --nproc-per-node 2 examples/tp_decode/decode.py --backend hiercoll --hidden 1024
    # the compute-only bound: the same sharded model, rank 0 alone, collectives that do nothing
    python examples/tp_decode/decode.py --backend fake --ranks 2 --hidden 1024
    # the lock-step bound: every rank at once, each with collectives that do nothing, meeting where the allreduces
    # would in a spin barrier on shared memory (an allreduce that moves no data and costs nothing)
    python examples/tp_decode/decode.py --backend fake --ranks 2 --lockstep --hidden 1024
    # the concurrent bound: every rank at once with collectives that do nothing, each on its own (no barrier where
    # the allreduces would be, one before the timed generate): the ranks' compute alone, sharing the machine
    python examples/tp_decode/decode.py --backend fake --ranks 2 --concurrent --hidden 1024
    # DeepSpeed's own tensor parallelism on CPUs: AutoTP over a gloo group, its row-parallel layers' allreduces
    # through DeepSpeed's shared-memory op (what vLLM, SGLang and DeepSpeed each wrote for this case)
    torchrun --nproc-per-node 2 examples/tp_decode/decode.py --backend deepspeed --hidden 1024

Per layer, q/k/v and gate/up are split column-wise and o/down row-wise (Megatron's layout): two allreduces of one
token's hidden state per layer and token, 8 B .. 8 KB each. One thread per rank (the cores are the ranks'). Prints
one JSON line: tokens/s of `generate` (greedy, KV cache) after a warm-up, and the tokens, which every backend that
computes the sums must give alike.

DeepSpeed shards the model its own way (AutoTP: the same column- and row-wise split of the decoder layers, and
lm_head split too, its logits allreduced), so its tokens may differ from the others' in the last bits of a sum.

Ranks in lock step wait at every allreduce for the slowest one's compute since the last, so the no-op bound (one rank
alone) is not reachable where compute times vary from call to call, as on a shared virtual machine; --lockstep
measures what is. Nor where ranks running at once slow each other down (memory bandwidth, the shared cache):
--concurrent measures that alone.
"""
import argparse
import datetime
import gc
import json
import mmap
import os
import subprocess
import sys
import tempfile
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


# Each decoder layer's plan: the row-wise projections are where the allreduces are.
PLAN = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(), "mlp.down_proj": RowwiseParallel()}


def shard(model, mesh):
    # Every rank built the same weights from the seed, so each cuts its own shards from them (src_data_rank=None)
    # instead of receiving them from rank 0. That matters for the bounds: under the no-op backend rank 0's scatter
    # moves nothing, and the shards stayed fresh, never-written pages, which read as zeros from the kernel's one zero
    # page, always in cache. The MLP's matmuls ran 3-4 times faster on those than on real weights (hidden 1024:
    # gate/up 95-125 against 335 us a call, down 70 against 322), so the bounds were out of any rank's reach.
    for layer in model.model.layers:
        parallelize_module(layer, mesh, PLAN, src_data_rank=None)
    return model


class SpinBarrier:
    """Ranks meet here, each spinning on shared memory until all have arrived. With --lockstep, where the allreduces
    would be: a collective that moves no data and costs nothing, so a rank's time is its compute plus its waits for
    the others. With --concurrent, once, before the timed generate, so that the ranks' timed runs overlap."""

    def __init__(self, path, rank, size):
        with open(path, "r+b") as f:
            self.shm = mmap.mmap(f.fileno(), 8 * size)
        self.arrived = torch.frombuffer(self.shm, dtype=torch.int64, count=size)  # calls each rank has begun
        self.rank, self.size, self.calls = rank, size, 0

    def __call__(self, *_):
        self.calls += 1
        self.arrived[self.rank] = self.calls
        spins, since = 0, time.monotonic()
        while int(self.arrived.min()) < self.calls:
            spins += 1
            if spins % 65536 == 0 and time.monotonic() - since > 300:
                raise RuntimeError(f"lock-step rank {self.rank}: the other ranks did not reach call {self.calls} "
                                   "in 300 s")

    def close(self):
        del self.arrived
        self.shm.close()


def run_bound_ranks(args):
    """--lockstep, --concurrent: starts one process per rank (this script, --bound-rank) on a fresh barrier; their
    exit status is ours."""
    shared = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.NamedTemporaryFile(dir=shared, prefix="tp-decode-bound-") as f:
        f.write(bytes(8 * args.ranks))
        f.flush()
        mode = "lockstep" if args.lockstep else "concurrent"
        argv = [a for a in sys.argv[1:] if a not in ("--lockstep", "--concurrent")]
        ranks = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv, "--bound-mode", mode,
                                   "--bound-rank", str(r), "--bound-shm", f.name]) for r in range(args.ranks)]
        while any(p.poll() is None for p in ranks):
            if any(p.poll() not in (None, 0) for p in ranks):  # the others would spin out their 300 s
                for p in ranks:
                    p.kill()
            time.sleep(0.1)
    return max((p.returncode for p in ranks), key=abs)


def deepspeed_tp(args, size):
    """The model sharded by DeepSpeed's AutoTP over the group made already, and what its allreduces run on: with
    --backend deepspeed DeepSpeed's shared-memory op, else the group's own all_reduce."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is imported
    # DeepSpeed's launcher sets LOCAL_SIZE; its shared-memory op sets itself up only where LOCAL_SIZE equals the world
    # size, and without it crashes in the first allreduce (0.19.8). torchrun's name for it:
    if "LOCAL_WORLD_SIZE" in os.environ:
        os.environ.setdefault("LOCAL_SIZE", os.environ["LOCAL_WORLD_SIZE"])
    import deepspeed

    deepspeed.init_distributed(dist_backend=dist.get_backend(), dist_init_required=False)  # wraps that group
    backend = deepspeed.comm.comm.cdb
    if args.backend != "deepspeed":  # DeepSpeed's own fallback (CPUs without the op's ISA): the group's all_reduce
        backend.shm_vector_kernel_level = 0
    engine = deepspeed.init_inference(build_model(args.hidden, args.layers, args.seed),
                                      tensor_parallel={"tp_size": size}, dtype=torch.float32,
                                      replace_with_kernel_inject=False)
    # Where inference_all_reduce goes: the op where it loaded and this CPU has its kernel's ISA for fp32 (avx2).
    if hasattr(torch.ops, "deepspeed") and hasattr(torch.ops.deepspeed, "inference_all_reduce_") and \
            getattr(backend, "shm_vector_kernel_level", 0) >= 1:
        return engine.module, "deepspeed shm"
    return engine.module, f"the group's all_reduce ({dist.get_backend()})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="hiercoll")
    parser.add_argument("--sharding", choices=["dtensor", "autotp"], default="dtensor",
                        help="dtensor: parallelize_module; autotp: DeepSpeed's AutoTP (plain tensors, one allreduce "
                             "call per row-parallel layer), its allreduces through the group's all_reduce, or with "
                             "--backend deepspeed through DeepSpeed's shared-memory op")
    parser.add_argument("--ranks", type=int, default=2, help="with --backend fake: the group size to pretend")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", action="store_true",
                        help="print torch.profiler's table of the timed generate (every rank): where a token's time goes")
    parser.add_argument("--lockstep", action="store_true",
                        help="with --backend fake: run every rank at once, meeting in a barrier that costs nothing")
    parser.add_argument("--concurrent", action="store_true",
                        help="with --backend fake: run every rank at once, each on its own (no barrier but one before "
                             "the timed generate)")
    parser.add_argument("--bound-mode", choices=["lockstep", "concurrent"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bound-rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--bound-shm", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for flag in ("lockstep", "concurrent"):
        if getattr(args, flag) and args.backend != "fake":
            parser.error(f"--{flag} needs --backend fake")
    if args.lockstep and args.concurrent:
        parser.error("--lockstep or --concurrent, not both")
    if args.lockstep or args.concurrent:
        sys.exit(run_bound_ranks(args))
    torch.set_num_threads(1)

    barrier = None
    if args.backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        fake_rank = args.bound_rank if args.bound_rank is not None else 0
        dist.init_process_group("fake", store=FakeStore(), rank=fake_rank, world_size=args.ranks)
        if args.bound_shm is not None:
            barrier = SpinBarrier(args.bound_shm, fake_rank, args.ranks)
    else:
        if args.backend == "hiercoll":
            import hiercoll_torch  # noqa: F401  (registers the backend)
        # DeepSpeed's shared-memory allreduce is set up over a gloo group (deepspeed_tp).
        dist.init_process_group("gloo" if args.backend == "deepspeed" else args.backend,
                                timeout=datetime.timedelta(seconds=300))
    rank, size = dist.get_rank(), dist.get_world_size()
    allreduce = args.backend
    if args.backend == "deepspeed" or args.sharding == "autotp":
        model, allreduce = deepspeed_tp(args, size)
    else:
        mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
        model = shard(build_model(args.hidden, args.layers, args.seed), mesh["tp"])
    if args.bound_mode == "lockstep":  # after each row-wise projection, where its output's allreduce is
        row_wise = [name for name, style in PLAN.items() if isinstance(style, RowwiseParallel)]
        for layer in model.model.layers:
            for name in row_wise:
                layer.get_submodule(name).register_forward_hook(barrier)

    generator = torch.Generator().manual_seed(args.seed + 1)
    prompt = torch.randint(0, model.config.vocab_size, (1, args.prompt), generator=generator)
    with torch.inference_mode():
        model.generate(prompt, max_new_tokens=4, do_sample=False)  # warm-up: allocations, first calls
        if args.backend != "fake":
            dist.barrier()
        elif barrier is not None:
            barrier()
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
        backend = args.bound_mode or args.backend
        print(json.dumps({"summary": True, "backend": backend, "ranks": size, "hidden": args.hidden,
                          "allreduce": allreduce, "layers": args.layers, "new_tokens": len(tokens),
                          "seconds": round(seconds, 4),
                          "tokens_per_s": round(len(tokens) / seconds, 3), "tokens": tokens}), flush=True)
    dist.destroy_process_group()
    if barrier is not None:
        barrier.close()


if __name__ == "__main__":
    main()
    # Under DeepSpeed a gloo group outlives main() in a reference cycle, so without this collection it is destroyed
    # by the one at interpreter exit. Its worker thread may still be releasing a finished allreduce's tensors then,
    # and a thread that asks for the GIL during finalization exits by a forced unwind through a noexcept destructor:
    # "terminate called without an active exception", SIGABRT (the core dump: ~AsyncAllreduceWork in
    # ProcessGroupGloo::runLoop, under gil_scoped_acquire; pytorch/pytorch#190489). Collected here, while the
    # interpreter still runs, the release just waits for the GIL. AutoTP with gloo, 2 ranks: 4 of 7 runs aborted at
    # exit without it, none of 12 with it.
    gc.collect()
