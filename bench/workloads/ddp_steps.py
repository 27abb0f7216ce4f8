"""A 4-rank DistributedDataParallel job on gloo that times its steps (bench/bench_monitor_ddp.py):
the MLP of tests/helpers/train_ddp.py (Linear 256-512-256, batch 64), its loop called DEPTH
calls deep (as a trainer's fit -> run -> loop -> step puts it: every stack py-spy reads is
DEPTH frames deeper), for SECONDS of wall time. Rank 0 decides when to stop and says so in
an all_reduce every 25 steps (every rank runs the same steps). Each rank writes
``steps_<rank>.txt``: one line a step, ``index start_monotonic seconds``.

    python ddp_steps.py OUT_DIR SECONDS DEPTH     (under mpilaunch: RANK from the adapter)
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out, seconds, depth = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
torch.manual_seed(0)


net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
model = DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
end = time.monotonic() + seconds
stop = torch.zeros(1)


def nest(k, f):
    return nest(k - 1, f) if k else loop(f)


def loop(f):
    i = 0
    while True:
        t0 = time.monotonic()
        g = torch.Generator().manual_seed(i * 97 + rank)
        x = torch.randn(64, 256, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        i += 1
        if i % 25 == 0:
            stop[0] = 1.0 if rank == 0 and t0 > end else 0.0
            dist.all_reduce(stop)
        f.write(f"{i} {t0:.6f} {time.monotonic() - t0:.6f}\n")
        if stop[0]:
            return


with open(os.path.join(out, f"steps_{rank}.txt"), "w", buffering=1) as f:
    nest(depth, f)
dist.destroy_process_group()
