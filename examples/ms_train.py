"""MindSpore 2.x CPU data-parallel training: a tiny linear model on deterministic data.

Run under msrun, a hand-written MS_* env launch, or mpilaunch. Every worker trains on its
rank's shard of a global batch; gradients are averaged (DATA_PARALLEL, gradients_mean),
so the parameters stay identical on every rank and equal a single-process run on the
combined batch (``--reference --world-size N``).

After every step each worker appends one JSON line to ``<out>/params_rank<R>.jsonl``:
``{"step": S, "rank": R, "size": N, "loss": L, "params": [floats...]}`` (the reference
writes ``params_reference.jsonl``). The last stdout line is ``MS_TRAIN_OK rank=R size=N``.

The scheduler process (MS_ROLE=MS_SCHED) runs this same file: everything before
``init()`` runs there too, and its ``init()`` never returns (the process exits when the
workers unregister), so nothing with side effects happens before ``init()``.

Options:
  --steps N                 training steps (default 5)
  --out DIR                 output dir (default $MPILAUNCH_EXAMPLE_OUT or ./example_out)
  --sleep-per-step SECONDS  sleep after each step (lets fault tests kill mid-training)
  --fail-at-step S --fail-rank R [--exit-code C]
                            rank R exits abruptly with code C (default 1) at the start of
                            step S (its step-S params are not written)
  --init-only               init(), print ``MS_INIT_OK rank=R size=N``, exit 0
  --mode pynative|graph     execution mode (default pynative)
  --reference               no init(): train on the combined batch of --world-size ranks
"""
import argparse
import json
import os
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
    p.add_argument("--mode", choices=("pynative", "graph"), default="pynative")
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


def build(ms):
    import numpy as np
    from mindspore import nn, Tensor
    net = nn.Dense(N_FEATURES, 1,
                   weight_init=Tensor(np.asarray([INIT_W], np.float32)),
                   bias_init=Tensor(np.asarray([INIT_B], np.float32)))
    opt = nn.SGD(net.trainable_params(), learning_rate=LR)
    # TrainOneStepCell inserts a DistributedGradReducer when the parallel mode is
    # DATA_PARALLEL (set before this call), and none in stand-alone mode.
    step_cell = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
    step_cell.set_train()
    return net, step_cell


def flat_params(net):
    out = []
    for p in net.trainable_params():
        out.extend(float(v) for v in p.asnumpy().reshape(-1))
    return out


def dump(fh, step, rank, size, loss, params):
    fh.write(json.dumps({"step": step, "rank": rank, "size": size,
                         "loss": loss, "params": params}) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def train(ms, rank, size, args, out_name):
    from mindspore import Tensor
    net, step_cell = build(ms)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, out_name)
    with open(path, "w") as fh:
        for step in range(1, args.steps + 1):
            if (args.fail_at_step is not None and step == args.fail_at_step
                    and rank == args.fail_rank and not args.reference):
                print(f"MS_TRAIN_FAIL rank={rank} step={step} code={args.exit_code}", flush=True)
                sys.stderr.flush()
                os._exit(args.exit_code)
            x, y = global_batch(step, size, args.batch_per_rank)
            if not args.reference:
                x, y = shard(x, y, rank, args.batch_per_rank)
            loss = step_cell(Tensor(x), Tensor(y))
            dump(fh, step, rank, size, float(loss.asnumpy()), flat_params(net))
            print(f"step {step} rank {rank} loss {float(loss.asnumpy()):.6f}", flush=True)
            if args.sleep_per_step > 0:
                time.sleep(args.sleep_per_step)
    return path


def main(argv=None):
    args = parse_args(argv)
    import mindspore as ms
    mode = ms.GRAPH_MODE if args.mode == "graph" else ms.PYNATIVE_MODE
    if hasattr(ms, "set_device"):  # 2.5+: set_context(device_target=) is deprecated (warns)
        ms.set_context(mode=mode)
        ms.set_device("CPU")
    else:
        ms.set_context(mode=mode, device_target="CPU")

    if args.reference:
        size = args.world_size or int(os.environ.get("MS_WORKER_NUM") or 2)
        train(ms, 0, size, args, "params_reference.jsonl")
        print(f"MS_REFERENCE_OK size={size}", flush=True)
        return 0

    from mindspore.communication import init, get_rank, get_group_size
    init()  # in the scheduler (MS_ROLE=MS_SCHED) this never returns
    rank, size = get_rank(), get_group_size()
    if args.init_only:
        print(f"MS_INIT_OK rank={rank} size={size}", flush=True)
        return 0

    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    train(ms, rank, size, args, f"params_rank{rank}.jsonl")
    print(f"MS_TRAIN_OK rank={rank} size={size}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
