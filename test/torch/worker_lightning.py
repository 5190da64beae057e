"""PyTorch Lightning's Trainer with its DDP strategy on a process group of argv[1]
(`DDPStrategy(process_group_backend=...)`), the ranks started outside Lightning (RANK, WORLD_SIZE, LOCAL_RANK, as
torchrun does); writes this rank's final parameters to argv[2].

Besides DDP's gradient allreduce, Lightning itself goes through the group: it broadcasts objects from rank 0 (the
log directory, the sampler seed), averages the logged loss over the ranks every step (`self.log(sync_dist=True)`,
an all_reduce), and meets in barriers at start and end. The logged averages are written too ("logged loss")."""
import os
import sys

import torch
import torch.nn as nn

import hiercoll_torch  # noqa: F401  (registers the backend)
import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DDPStrategy

backend, out_path = sys.argv[1], sys.argv[2]
size, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))

    def training_step(self, batch, _):
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, sync_dist=True, on_step=True, on_epoch=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class LoggedLoss(Callback):
    """The loss as Lightning logged it: the average over the ranks, after every step."""

    def __init__(self):
        self.values = []

    def on_train_batch_end(self, trainer, *_):
        self.values.append(trainer.callback_metrics["loss"].item())


generator = torch.Generator().manual_seed(1)
data = torch.utils.data.TensorDataset(torch.randn(128, 16, generator=generator),
                                      torch.randint(0, 4, (128,), generator=generator))
# A sequential sampler: Lightning puts a DistributedSampler in its place, each rank its own 1/size of the data.
loader = torch.utils.data.DataLoader(data, batch_size=8)
logged = LoggedLoss()
trainer = L.Trainer(accelerator="cpu", devices=size, num_nodes=1, strategy=DDPStrategy(process_group_backend=backend),
                    max_epochs=2, callbacks=[logged], logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, default_root_dir=f"{out_path}-lightning")
model = Model()
trainer.fit(model, loader)
assert trainer.strategy.root_device.type == "cpu" and trainer.world_size == size, (trainer.world_size, size)
result = {name: p.detach().clone() for name, p in model.named_parameters()}
result["logged loss"] = torch.tensor(logged.values)
torch.save(result, f"{out_path}.{rank}")
print(f"rank {rank}: {len(logged.values)} steps, last logged loss {logged.values[-1]:.6f}", flush=True)
