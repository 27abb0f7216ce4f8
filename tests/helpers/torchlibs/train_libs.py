"""One worker of the training-library tests (tests/e2e/test_torch_libs.py): the same tiny
model trained by DeepSpeed's init_distributed (gloo, then allreduced gradients), HF Accelerate
(``Accelerator(cpu=True)``), Lightning Fabric and Lightning Trainer (DDP) in one process, each
from the same initial weights on the same rank shards; what each library decided about the
launch and its final weights go to OUT/rank_<RANK>.json.

DeepSpeed initialises the process group first: with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
and LOCAL_RANK all set it uses them, else it runs its own MPI discovery (mpi4py) -- whether
mpi4py got imported is recorded. The others then find the group up and keep it; what they
decide about the launch (Lightning's cluster environment, Accelerate's distributed type) comes
from the environment either way.

``--fail-rank R``: on restart count 0, rank R exits 3 before training (an in-place restart's
first attempt); the run id it saw goes to OUT/failed_<R>.json first.
"""
import argparse
import json
import os
import sys
import warnings

STEPS, LR = 3, 0.1


def data(torch):
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)


def fresh_model(torch):
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def weights(model):
    return [round(float(v), 7) for p in model.parameters() for v in p.detach().flatten()]


def shard(torch, rank, world):
    x, y = data(torch)
    return x[rank::world], y[rank::world]


def train_deepspeed(torch, rank, world):
    import deepspeed
    import deepspeed.comm as dist

    deepspeed.init_distributed(dist_backend="gloo")
    model = fresh_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = shard(torch, rank, world)
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    return {"rank": dist.get_rank(), "world": dist.get_world_size(),
            "mpi4py_imported": "mpi4py" in sys.modules, "weights": weights(model)}


def train_accelerate(torch, rank, world):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model = fresh_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model, opt = acc.prepare(model, opt)
    x, y = shard(torch, rank, world)
    for _ in range(STEPS):
        opt.zero_grad()
        acc.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
    return {"distributed_type": str(acc.distributed_type).split(".")[-1],
            "rank": acc.process_index, "world": acc.num_processes,
            "weights": weights(acc.unwrap_model(model))}


def _sizes():
    return int(os.environ["LOCAL_WORLD_SIZE"]), int(os.environ.get("GROUP_WORLD_SIZE", "1"))


def train_fabric(torch, rank, world):
    from lightning.fabric import Fabric

    devices, nodes = _sizes()
    fabric = Fabric(accelerator="cpu", strategy="ddp", devices=devices, num_nodes=nodes)
    fabric.launch()
    model = fresh_model(torch)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    model, opt = fabric.setup(model, opt)
    x, y = shard(torch, fabric.global_rank, fabric.world_size)
    for _ in range(STEPS):
        opt.zero_grad()
        fabric.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
    return {"env": type(fabric.strategy.cluster_environment).__name__,
            "rank": fabric.global_rank, "world": fabric.world_size,
            "weights": weights(model.module)}


def train_trainer(torch, rank, world):
    import lightning.pytorch as pl

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = fresh_model(torch)

        def training_step(self, batch, _):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)

    x, y = data(torch)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=len(x) // world)
    devices, nodes = _sizes()
    module = Module()
    trainer = pl.Trainer(accelerator="cpu", strategy="ddp", devices=devices, num_nodes=nodes,
                         max_steps=STEPS, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)
    return {"env": type(trainer.strategy.cluster_environment).__name__,
            "rank": trainer.global_rank, "world": trainer.world_size,
            "weights": weights(module.net)}


LIBS = {"deepspeed": train_deepspeed, "accelerate": train_accelerate,
        "fabric": train_fabric, "trainer": train_trainer}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--fail-rank", type=int, default=None)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    seen = {k: os.environ.get(k) for k in (
        "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE",
        "GROUP_WORLD_SIZE", "SLURM_PROCID", "OMP_NUM_THREADS")}
    if args.fail_rank == rank and seen["TORCHELASTIC_RESTART_COUNT"] == "0":
        with open(os.path.join(args.out, f"failed_{rank}.json"), "w") as fh:
            json.dump(seen, fh)
        sys.exit(3)
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed

    result = {"env": seen, "torchelastic": torch.distributed.is_torchelastic_launched()}
    for name in args.libs.split(","):
        result[name] = LIBS[name](torch, rank, world)
    with open(os.path.join(args.out, f"rank_{rank}.json"), "w") as fh:
        json.dump(result, fh)
    torch.distributed.destroy_process_group()
    # No interpreter finalization: with these libraries loaded, a C++ destructor at exit aborts
    # the process now and then ("terminate called without an active exception", SIGABRT):
    # 2 runs in 10 under torchrun, as under mpilaunch; the record above is complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
