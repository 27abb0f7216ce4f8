"""The restartable training script of the job-wide restart tests (tests/e2e/test_restart.py,
tests/multihost/test_restart_multinode.py)."""

# A 2-rank data-parallel linear model, gradients averaged with all_reduce (gloo), a checkpoint
# (rank 0, atomic rename) every --every steps; resumes from it. --kill-step S: rank --kill-rank
# SIGKILLs itself at step S (attempt 0 only, unless --kill-always); --hold-step S: it writes its
# pid to holding_<rank> and waits there (attempt 0) for a test to kill it. Rank 0 writes the
# final parameters as exact float hex strings.
TRAIN = r'''
import argparse, json, os, signal, sys, time
p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
p.add_argument("--every", type=int, default=3)
p.add_argument("--out")
p.add_argument("--kill-step", type=int, default=None)
p.add_argument("--kill-rank", type=int, default=1)
p.add_argument("--kill-always", action="store_true")
p.add_argument("--hold-step", type=int, default=None)
a = p.parse_args()
import torch, torch.distributed as dist
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
attempt = int(os.environ.get("MPILAUNCH_RESTART_COUNT", "0"))
print(f"rank={rank} restart={os.environ.get('MPILAUNCH_RESTART_COUNT')} "
      f"torchelastic={os.environ.get('TORCHELASTIC_RESTART_COUNT')} "
      f"port={os.environ['MASTER_PORT']}", flush=True)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
ckpt = os.path.join(a.out, "ckpt.pt")
start = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    start = state["step"]
for step in range(start + 1, a.steps + 1):
    if step == a.kill_step and rank == a.kill_rank and (attempt == 0 or a.kill_always):
        os.kill(os.getpid(), signal.SIGKILL)
    if step == a.hold_step and rank == a.kill_rank and attempt == 0:
        with open(os.path.join(a.out, f"holding_{rank}"), "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)       # until a test kills it from outside
    if step == start + 1:
        with open(os.path.join(a.out, f"first_step_{attempt}_{rank}"), "w") as f:
            f.write(repr(time.time()))
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(8 * size, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [3.0], [0.5]]) + 0.25
    xs, ys = x[8 * rank:8 * rank + 8], y[8 * rank:8 * rank + 8]
    model.zero_grad()
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    with torch.no_grad():
        for prm in model.parameters():
            dist.all_reduce(prm.grad)
            prm -= 0.1 * prm.grad / size
    print(f"step {step}", flush=True)
    if step % a.every == 0:
        dist.barrier()
        if rank == 0:
            torch.save({"model": model.state_dict(), "step": step}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        dist.barrier()
if rank == 0:
    vals = [v.hex() for prm in model.parameters() for v in prm.detach().flatten().tolist()]
    with open(os.path.join(a.out, "final.json"), "w") as f:
        json.dump(vals, f)
dist.destroy_process_group()
'''

# A DDP job as users write one (tests/e2e/test_restart_learn.py): DistributedDataParallel over
# gloo, SGD, a checkpoint loaded with torch.load. Its first line records which modules its
# interpreter already had (seen_<attempt>_<rank>: JSON list); after its first step attempt 0
# records the modules it imported since its start (imported_0_<rank>) and the time
# (settled_0_<rank>), then waits: rank 1 holds (its pid in holding_1) until the test kills it,
# rank 0 in the next all-reduce. Attempt 1 trains to the end and writes done_<rank>.
DDP_TRAIN = r'''
import json, os, sys, time
out = sys.argv[1]
attempt, rank = int(os.environ["MPILAUNCH_RESTART_COUNT"]), int(os.environ["RANK"])
def put(name, value):
    with open(os.path.join(out, name + ".tmp"), "w") as f:
        f.write(value)
    os.replace(os.path.join(out, name + ".tmp"), os.path.join(out, name))
before = set(sys.modules)
put(f"seen_{attempt}_{rank}", json.dumps(sorted(before)))
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
ckpt = os.path.join(out, "ckpt.pt")
start = 0
if os.path.exists(ckpt):
    st = torch.load(ckpt)
    model.module.load_state_dict(st["model"])
    opt.load_state_dict(st["opt"])
    start = st["step"]
for step in range(start + 1, start + 4):
    x = torch.randn(4, 8)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
    print(f"step {step}", flush=True)     # the first one ends the restart's last phase
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step},
                   ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
    if attempt == 0 and step == 1:
        put(f"imported_0_{rank}", json.dumps(sorted(set(sys.modules) - before)))
        put(f"settled_0_{rank}", repr(time.time()))
        if rank == 1:
            put("holding_1", str(os.getpid()))
            time.sleep(600)
put(f"done_{rank}", "ok")
dist.destroy_process_group()
# No interpreter finalization: with torch's gloo threads about, a C++ destructor at exit aborts
# the process now and then ("terminate called without an active exception", SIGABRT; seen
# under torchrun as under mpilaunch, docs/FROM_TORCHRUN.md); the run the test reads is over.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
'''


def worker_script(cmd):
    """The script a worker process runs, from its command line: ``PYTHON SCRIPT ...``, or an
    in-place job's ``PYTHON .../rank/inplace/spare.py --run FD SCRIPT ...`` (a worker that
    tells its adapter what it imported: rank/inplace/learn.py); None for anything else."""
    if len(cmd) >= 5 and cmd[1].endswith("spare.py") and cmd[2] == "--run":
        return cmd[4]
    return cmd[1] if len(cmd) >= 2 else None
