"""A 4-rank torch/gloo training loop that times its steps (bench/bench_monitor.py): each step a
256x256 matmul and an all_reduce of the result, for SECONDS of wall time (rank 0 decides when
to stop and says so in the all_reduce, so every rank runs the same steps). Each rank writes
``steps_<rank>.txt``: one line a step, ``index start_monotonic seconds``.

    python gloo_steps.py OUT_DIR SECONDS      (under mpilaunch: RANK from the adapter)
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

out, seconds = sys.argv[1], float(sys.argv[2])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
torch.set_num_threads(1)
a = torch.rand(256, 256)
end = time.monotonic() + seconds
with open(os.path.join(out, f"steps_{rank}.txt"), "w", buffering=1) as f:
    i = 0
    while True:
        t0 = time.monotonic()
        x = a @ a
        stop = torch.tensor([1.0 if rank == 0 and t0 > end else 0.0])
        both = torch.cat([x.flatten(), stop])
        dist.all_reduce(both)
        f.write(f"{i} {t0:.6f} {time.monotonic() - t0:.6f}\n")
        i += 1
        if both[-1].item() > 0:
            break
dist.destroy_process_group()
