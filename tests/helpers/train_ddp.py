"""A 4-rank training job as people write it (docs/MONITOR.md, "DDP and FSDP"): a small MLP
under DistributedDataParallel (``MODE = "ddp"``) or FSDP2's ``fully_shard`` (``"fsdp"``) on
gloo, no collective of the script's own in its steps. ``SLOW_RANK`` reads each batch
``SLOW_SECONDS`` (40 ms) slower; with ``CKPT_EVERY`` rank 0 saves a checkpoint that often. Run as ``train.py OUT_DIR SLOW_RANK`` (-1: balanced): writes OUT_DIR/training once
every rank has made its first step and leaves at the next 25th step after OUT_DIR/stop
appears (the one all_reduce of its own, every 25 steps, so every rank stops at the same one).
Read by tests/e2e/test_straggler_ddp.py, which writes it as the job's script."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

MODE = "ddp"
SLOW_SECONDS = 0.04
CKPT_EVERY = 0          # s between rank 0's checkpoints (0: none); each takes CKPT_SECONDS
CKPT_SECONDS = 3.5
out, slow = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
if MODE == "fsdp":
    from torch.distributed.fsdp import fully_shard

    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    model = fully_shard(net)
else:
    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def read_batch(step):
    if rank == slow:
        time.sleep(SLOW_SECONDS)
    g = torch.Generator().manual_seed(step * 97 + rank)
    return torch.randn(64, 256, generator=g)


def save_checkpoint(step):
    """Rank 0 saves the model while the others wait for it in their next backward (a slow
    disk: CKPT_SECONDS in all)."""
    t = time.time()
    torch.save(model.state_dict(), os.path.join(out, "checkpoint.pt"))
    time.sleep(max(0.0, CKPT_SECONDS - (time.time() - t)))
    with open(os.path.join(out, "saves"), "a") as f:     # one line a save, for the test
        f.write(f"{step} {t!r}\n")


def train():
    step, stop = 0, torch.zeros(1)
    next_save = time.time() + CKPT_EVERY
    while True:
        if CKPT_EVERY and rank == 0 and time.time() >= next_save:
            save_checkpoint(step)
            next_save = time.time() + CKPT_EVERY
        x = read_batch(step)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if rank == 0 and step == 1:
            with open(os.path.join(out, "training"), "w") as f:
                f.write(repr(time.time()))
        if step % 25 == 0:
            stop[0] = float(os.path.exists(os.path.join(out, "stop")))
            dist.all_reduce(stop)
            if stop[0]:
                return


train()
dist.destroy_process_group()
# No interpreter finalization: with torch's gloo threads about, a C++ destructor at exit aborts
# the process now and then ("terminate called without an active exception", SIGABRT; seen
# under torchrun as under mpilaunch, docs/FROM_TORCHRUN.md); the run the test reads is over.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
