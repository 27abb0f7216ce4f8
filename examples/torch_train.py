"""PyTorch CPU data-parallel training (gloo + DDP): a tiny linear model on deterministic data.

Reads MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK (as set by torchrun or the
mpilaunch rank adapter), ``init_process_group("gloo")``, wraps the model in DDP. Every
rank trains on its shard of a global batch; DDP averages gradients, so the parameters stay
identical on every rank and equal a single-process run on the combined batch
(``--reference --world-size N``).

After every step each rank appends one JSON line to ``<out>/params_rank<R>.jsonl``:
``{"step": S, "rank": R, "size": N, "loss": L, "params": [floats...]}`` (the reference
writes ``params_reference.jsonl``). The last stdout line is ``TORCH_TRAIN_OK rank=R size=N``.

If started as a MindSpore scheduler copy (MS_ROLE=MS_SCHED) it exits 0 at once, printing
nothing: PyTorch has no separate scheduler process.

Options:
  --steps N                 training steps (default 5)
  --out DIR                 output dir (default $MPILAUNCH_EXAMPLE_OUT or ./example_out)
  --sleep-per-step SECONDS  sleep after each step (lets fault tests kill mid-training)
  --fail-at-step S --fail-rank R [--exit-code C]
                            rank R exits abruptly with code C (default 1) at the start of
                            step S (its step-S params are not written)
  --init-only               init_process_group, print ``TORCH_INIT_OK rank=R size=N``, exit 0
  --timeout SECONDS         process-group timeout (default 300)
  --reference               no process group: train on the combined batch of --world-size ranks
"""
import argparse
import datetime
import json
import os
import socket
import sys
import time

N_FEATURES = 4
TRUE_W = [1.0, -2.0, 3.0, 0.5]
TRUE_B = 0.25
INIT_W = [0.1, -0.1, 0.2, 0.0]
INIT_B = 0.05
LR = 0.1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", default=os.environ.get("MPILAUNCH_EXAMPLE_OUT") or "./example_out")
    p.add_argument("--batch-per-rank", type=int, default=8)
    p.add_argument("--sleep-per-step", type=float, default=0.0)
    p.add_argument("--fail-at-step", type=int, default=None)
    p.add_argument("--fail-rank", type=int, default=0)
    p.add_argument("--exit-code", type=int, default=1)
    p.add_argument("--init-only", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--reference", action="store_true")
    p.add_argument("--world-size", type=int, default=None,
                   help="with --reference: number of ranks whose shards form the batch")
    return p.parse_args(argv)


def global_batch(step, size, batch_per_rank):
    """The step's combined batch (identical in every process): x (G,4), y (G,1), float32."""
    import numpy as np
    rs = np.random.RandomState(1000 + step)
    g = size * batch_per_rank
    x = rs.standard_normal((g, N_FEATURES)).astype(np.float32)
    noise = 0.01 * rs.standard_normal((g, 1)).astype(np.float32)
    y = (x @ np.asarray(TRUE_W, np.float32).reshape(N_FEATURES, 1) + TRUE_B + noise).astype(np.float32)
    return x, y


def shard(x, y, rank, batch_per_rank):
    lo, hi = rank * batch_per_rank, (rank + 1) * batch_per_rank
    return x[lo:hi], y[lo:hi]


def build(torch):
    model = torch.nn.Linear(N_FEATURES, 1)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([INIT_W], dtype=torch.float32))
        model.bias.copy_(torch.tensor([INIT_B], dtype=torch.float32))
    return model


def flat_params(model):
    out = []
    for p in model.parameters():
        out.extend(float(v) for v in p.detach().reshape(-1).tolist())
    return out


def dump(fh, step, rank, size, loss, params):
    fh.write(json.dumps({"step": step, "rank": rank, "size": size,
                         "loss": loss, "params": params}) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def train(torch, rank, size, args, out_name, ddp=False):
    model = build(torch)
    module = model
    if ddp:
        from torch.nn.parallel import DistributedDataParallel
        module = DistributedDataParallel(model)
    opt = torch.optim.SGD(module.parameters(), lr=LR)
    loss_fn = torch.nn.MSELoss()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, out_name)
    with open(path, "w") as fh:
        for step in range(1, args.steps + 1):
            if (args.fail_at_step is not None and step == args.fail_at_step
                    and rank == args.fail_rank and not args.reference):
                print(f"TORCH_TRAIN_FAIL rank={rank} step={step} code={args.exit_code}", flush=True)
                sys.stderr.flush()
                os._exit(args.exit_code)
            x, y = global_batch(step, size, args.batch_per_rank)
            if not args.reference:
                x, y = shard(x, y, rank, args.batch_per_rank)
            opt.zero_grad()
            loss = loss_fn(module(torch.from_numpy(x)), torch.from_numpy(y))
            loss.backward()
            opt.step()
            dump(fh, step, rank, size, float(loss.item()), flat_params(model))
            print(f"step {step} rank {rank} loss {loss.item():.6f}", flush=True)
            if args.sleep_per_step > 0:
                time.sleep(args.sleep_per_step)
    return path


def main(argv=None):
    if os.environ.get("MS_ROLE") == "MS_SCHED":
        return 0
    args = parse_args(argv)
    import torch
    torch.set_num_threads(1)

    if args.reference:
        size = args.world_size or int(os.environ.get("WORLD_SIZE") or 2)
        train(torch, 0, size, args, "params_reference.jsonl")
        print(f"TORCH_REFERENCE_OK size={size}", flush=True)
        return 0

    import torch.distributed as dist
    rank = int(os.environ["RANK"])
    size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # env:// reads MASTER_ADDR / MASTER_PORT (and RANK / WORLD_SIZE).
    dist.init_process_group("gloo", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    try:
        if args.init_only:
            print(f"TORCH_INIT_OK rank={rank} size={size} local_rank={local_rank} "
                  f"host={socket.gethostname()}", flush=True)
            return 0
        train(torch, rank, size, args, f"params_rank{rank}.jsonl", ddp=True)
    finally:
        dist.destroy_process_group()
    print(f"TORCH_TRAIN_OK rank={rank} size={size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
