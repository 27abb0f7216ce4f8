"""A 4-rank Lightning Trainer job (DDP on gloo, CPU) as people write it, for
tests/e2e/test_straggler_ddp.py: the MLP of tests/helpers/train_ddp.py, one batch a step from a
Dataset whose ``__getitem__`` sleeps 40 ms on ``SLOW_RANK`` (a slow reader). Run as
``train.py OUT_DIR SLOW_RANK``: writes OUT_DIR/training at its first step and stops at the next
25th step after OUT_DIR/stop appears (rank 0 tells every rank through the strategy's broadcast,
so all stop at the same step)."""
import os
import sys
import time
import warnings

import torch
import lightning.pytorch as pl

warnings.filterwarnings("ignore")
out, slow = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 10 ** 7

    def __getitem__(self, i):
        if rank == slow:
            time.sleep(0.04)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, 256, generator=g)


class Module(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                       torch.nn.Linear(512, 256))

    def training_step(self, batch, _):
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class StopFile(pl.Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, i):
        if rank == 0 and trainer.global_step == 1:
            with open(os.path.join(out, "training"), "w") as f:
                f.write(repr(time.time()))
        if trainer.global_step % 25 == 0:
            stop = os.path.exists(os.path.join(out, "stop"))
            trainer.should_stop = bool(trainer.strategy.broadcast(stop, src=0))


local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=local, num_nodes=world // local,
                     max_epochs=1, logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, callbacks=[StopFile()])
trainer.fit(Module(), torch.utils.data.DataLoader(Batches(), batch_size=1, num_workers=0))
# No interpreter finalization: with torch's gloo threads about, a C++ destructor at exit aborts
# the process now and then ("terminate called without an active exception", SIGABRT; seen
# under torchrun as under mpilaunch, docs/FROM_TORCHRUN.md); the run the test reads is over.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
