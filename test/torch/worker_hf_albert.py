"""Hugging Face AlbertForMaskedLM (tiny config, built locally, nothing downloaded) in DDP for 20 steps of masked-LM
training; writes this rank's final parameters and its loss curve to argv[2].<rank>. argv[1]: the backend."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from transformers import AlbertConfig, AlbertForMaskedLM

import hiercoll_torch  # noqa: F401

backend, out_path = sys.argv[1], sys.argv[2]
dist.init_process_group(backend=backend)
rank = dist.get_rank()

VOCAB, SEQ, BATCH, MASK_ID = 120, 16, 4, 4
config = AlbertConfig(vocab_size=VOCAB, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, classifier_dropout_prob=0.0)
torch.manual_seed(0)
model = AlbertForMaskedLM(config)
# Small buckets: ALBERT shares one layer's parameters across depth, so several buckets still overlap backward.
ddp = DDP(model, bucket_cap_mb=0.02)
opt = torch.optim.AdamW(ddp.parameters(), lr=3e-3)

gen = torch.Generator().manual_seed(200 + rank)  # each rank its own batches
losses = []
for step in range(20):
    ids = torch.randint(5, VOCAB, (BATCH, SEQ), generator=gen)
    # A learnable pattern: the second half of each sequence repeats the first.
    ids[:, SEQ // 2:] = ids[:, :SEQ // 2]
    masked = torch.rand(BATCH, SEQ, generator=gen) < 0.15
    masked[:, -1] = True  # at least one prediction per sequence
    labels = torch.where(masked, ids, torch.full_like(ids, -100))
    inputs = torch.where(masked, torch.full_like(ids, MASK_ID), ids)
    loss = ddp(input_ids=inputs, attention_mask=torch.ones_like(ids), labels=labels).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())

dist.barrier()
state = {k: v.detach().clone() for k, v in model.state_dict().items()}
state["losses"] = torch.tensor(losses, dtype=torch.float64)
torch.save(state, f"{out_path}.{rank}")
print(f"rank {rank} losses {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
dist.destroy_process_group()
