"""A Lightning Trainer that asks for Slurm's auto-requeue itself
(``plugins=[SLURMEnvironment(auto_requeue=True)]``), run by ``mpilaunch --launcher srun`` in
tests/slurm/test_lightning_requeue.py. Each rank writes ``OUT/env_<restart>_<rank>.json`` (the
cluster environment Lightning chose, its ranks, the step it started from) once training runs,
then trains until stopped.

    lightning_requeue.py OUT
"""
import json
import os
import sys
import time

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.plugins.environments import SLURMEnvironment
from torch.utils.data import DataLoader

out = sys.argv[1]


class Tiny(LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        if not getattr(self, "recorded", False):    # this run's first step (a requeued run resumes)
            self.recorded = True
            env = self.trainer._accelerator_connector.cluster_environment
            record = {"env": type(env).__name__, "global_rank": self.global_rank,
                      "world_size": self.trainer.world_size, "local_rank": self.local_rank,
                      "step": self.global_step}
            name = f"env_{os.environ.get('SLURM_RESTART_COUNT', '0')}_{self.global_rank}.json"
            with open(os.path.join(out, name), "w") as f:
                json.dump(record, f)
        time.sleep(0.02)
        return self.layer(batch).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(torch.randn(1 << 20, 4), batch_size=4)


trainer = Trainer(accelerator="cpu", devices=2, num_nodes=1, strategy="ddp",
                  plugins=[SLURMEnvironment(auto_requeue=True)], max_steps=1 << 30, logger=False,
                  enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, default_root_dir=out)
trainer.fit(Tiny())
