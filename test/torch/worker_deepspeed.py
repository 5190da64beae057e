"""DeepSpeed ZeRO training on CPU over a process group of argv[1] (`deepspeed.init_distributed(dist_backend=...)`,
DeepSpeed's CPU accelerator); writes this rank's final parameters, gathered whole, to argv[2].

argv[3]: the ZeRO stage. Stage 1 shards the optimizer state (gradients averaged by allreduce, updated parameters
allgathered), stage 2 the gradients too (reduce-scattered in buckets, or reduced to their owner), stage 3 the
parameters as well (allgathered before each layer's forward and backward). Each rank trains on its own batches."""
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")  # read when deepspeed is imported

import torch
import torch.nn as nn

import hiercoll_torch  # noqa: F401  (registers the backend)
import deepspeed

backend, out_path, stage = sys.argv[1], sys.argv[2], int(sys.argv[3])
deepspeed.init_distributed(dist_backend=backend)
rank, size = torch.distributed.get_rank(), torch.distributed.get_world_size()
assert torch.distributed.get_backend() == backend, torch.distributed.get_backend()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))
config = {
    "train_micro_batch_size_per_gpu": 8,
    "gradient_accumulation_steps": 1,
    # Small buckets, so that even this model's gradients and parameters move in several collectives.
    "zero_optimization": {"stage": stage, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000,
                          "stage3_prefetch_bucket_size": 1000, "stage3_param_persistence_threshold": 0},
    "zero_allow_untested_optimizer": True,  # a torch optimizer, not one of DeepSpeed's compiled ones
    "steps_per_print": 1 << 30,
}
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                       config=config)
generator = torch.Generator().manual_seed(100 + rank)
for step in range(8):
    x = torch.randn(8, 16, generator=generator)
    y = torch.randint(0, 4, (8,), generator=generator)
    loss = nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()

with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=stage == 3):
    result = {name: p.detach().clone() for name, p in engine.module.named_parameters()}
torch.save(result, f"{out_path}.{rank}")
print(f"rank {rank}: ZeRO stage {stage}, last loss {loss.item():.6f}", flush=True)
engine.destroy()
torch.distributed.destroy_process_group()
