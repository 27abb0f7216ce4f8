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
