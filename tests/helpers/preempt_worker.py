"""A preemptible training job: a DataLoader with two worker processes feeds each rank's steps;
on SIGTERM the rank finishes its step, saves a checkpoint and exits 0 (what Slurm's --signal,
Kubernetes' pod deletion and a platform's stop rely on). ``OUT/up_<rank>`` once the DataLoader's
workers serve, ``OUT/saved_<rank>`` (the step it saved at) after the save.

    preempt_worker.py OUT
"""
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

out = sys.argv[1]
rank = int(os.environ["RANK"])
stop = []
signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))


class Endless(Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        time.sleep(0.01)     # a worker process's share of the data loading
        return torch.full((4,), float(i % 7))


model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Endless(), batch_size=4, num_workers=2)
for step, batch in enumerate(loader):
    loss = model(batch).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 0:
        open(os.path.join(out, f"up_{rank}"), "w").close()
    if stop:
        # the DataLoader's workers must still be alive here: the save below runs while they
        # are (torch raises in this process the moment one of them dies of a signal)
        path = os.path.join(out, f"ckpt_{rank}.pt")
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, path)
        time.sleep(0.5)     # a checkpoint's write takes a while
        with open(os.path.join(out, f"saved_{rank}"), "w") as f:
            f.write(str(step))
        sys.exit(0)
