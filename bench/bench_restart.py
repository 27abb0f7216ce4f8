"""Restart latency and graceful-stop latency.

1. **Restart**: 2 ranks train (torch, gloo, a checkpoint every step); rank 1 SIGKILLs itself
   at step ``--kill-step`` (4) of attempt 0 and writes the time just before. Measured: that
   time -> the restarted job's first training step (the latest rank's), for ``mpilaunch
   --max_restarts 1`` (its default restart mode: in place) and torchrun's standard single-node
   form ``torchrun --standalone --nnodes 1 --nproc-per-node 2 --max-restarts 1`` on the same
   script, interleaved. Also a fresh launch (launcher start -> first step of attempt 0) for the
   restart overhead, and where a restart's time goes: kill -> the restarted script's first
   line (the latest rank's; the launcher's, the adapters' and the interpreter's part), that
   line -> its first step (the worker's own re-initialisation: the imports a spare had not
   done yet, ``init_process_group``, the checkpoint).

   The script handles ``TORCHELASTIC_RESTART_COUNT``: under torchrun
   (``TORCHELASTIC_USE_AGENT_STORE=True``) the workers' TCPStore is the agent's, which
   outlives a restart with the last attempt's keys in it, so each attempt's keys go under a
   ``PrefixStore("attempt<k>")``. Without that (``init_process_group("gloo")`` alone, as in
   torch's own examples) attempt 1 reads attempt 0's gloo addresses and fails with
   "Gloo connectFullMesh failed ... Connection refused" (pytorch/pytorch#135712;
   ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` is torch's switch for it). ``--stock`` runs that
   unmodified script once under torchrun and prints what happened. Under mpilaunch every
   attempt is a new mpirun with a fresh port: no state survives, the plain init works.
2. **Stop**: SIGTERM to mpilaunch -> launcher and every descendant gone, workers that exit
   at once on SIGTERM (a 0 s save): ``--term-grace 5`` vs no grace (Open MPI's own teardown).

    python3 bench/bench_restart.py [--trials 5] [--mpirun PATH] [--stock] [--no-stop]
                                   [--kinds mpilaunch,nolearn,fresh,freshnohold,relaunch,torchrun]
                                   [--settle S]
                                   [--kill-step N] [--workload linear|ddp]

   ``--workload ddp`` trains as users write it: ``DistributedDataParallel``, SGD, the model's
   and the optimizer's state in the checkpoint, loaded with ``torch.load``. Each restart is
   also split by the script's own stamps (the latest rank's): kill -> its first line, ->
   torch imported, -> ``init_process_group`` back, -> the model built, -> the checkpoint
   loaded, -> the first step. ``nolearn`` is ``mpilaunch`` with ``MPILAUNCH_SPARE_LEARN=0``:
   the spare imports the script's heavy modules only, not what the worker imported
   (rank/inplace/learn.py). ``fresh`` is ``mpilaunch`` without spares
   (``MPILAUNCH_SPARE_PRELOAD=``): every restarted worker is a fresh interpreter, as on a busy
   machine where the spares are discarded; ``freshnohold`` also without rank 0's store holder
   (``MPILAUNCH_STORE_HOLD=0``, rank/inplace/hold.py): its ``init`` phase shows TCPStore's
   client back-off when rank 0's worker comes last to its own store. Every kind also prints
   ``init_process_group``'s time at the first launch (the last rank's import -> the last init).

   ``mpilaunch`` is ``mpilaunch --max_restarts 1`` in its default mode, in place: mpirun and
   the adapters stay, the next attempt's worker interpreter was started (torch imported) while
   attempt 0 ran (mpilaunch/rank/inplace/loop.py); ``relaunch`` adds ``--restart-mode
   relaunch`` (a new mpirun). Each trial also times the *floor*: a fresh interpreter importing
   torch and torch.distributed, what a restart costs at least without such a spare.

Prints one line per trial and the medians; nothing is asserted (tests/ test behaviour).
Only the processes a trial started (the launcher's descendants, seen while it ran) are
killed after it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = r'''
import os, signal, sys, time
out = sys.argv[1]
STOCK = len(sys.argv) > 2 and sys.argv[2] == "--stock"
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
KILL = int(os.environ.get("BENCH_KILL_STEP", "4"))
DDP = os.environ.get("BENCH_WORKLOAD") == "ddp"
def stamp(what):
    open(os.path.join(out, f"{what}_{attempt}_{os.environ['RANK']}"), "w").write(repr(time.time()))
stamp("line")
import torch, torch.distributed as dist
stamp("imported")
rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and not STOCK:
    # torchrun: the agent's store keeps the last attempt's keys: keep each attempt's apart
    store = dist.PrefixStore(f"attempt{attempt}", dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=size)
else:
    dist.init_process_group("gloo")
stamp("init")
model = torch.nn.Linear(64, 1)
if DDP:     # as users write it: DDP, an optimizer, its state in the checkpoint
    model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
stamp("model")
ckpt = os.path.join(out, "ckpt.pt")
start = 0
if os.path.exists(ckpt):
    st = torch.load(ckpt)
    model.load_state_dict(st["model"])
    if DDP:
        opt.load_state_dict(st["opt"])
    start = st["step"]
stamp("loaded")
dist.barrier()      # every rank has read the checkpoint before rank 0 writes the next one
for step in range(start + 1, KILL + 4):
    if attempt == 0 and step == KILL:      # --settle: attempt 0 runs that much longer first
        time.sleep(float(os.environ.get("BENCH_SETTLE", "0")))
    if attempt == 0 and rank == 1 and step == KILL:
        open(os.path.join(out, "killed"), "w").write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(16, 64)
    model.zero_grad()
    model(x).pow(2).mean().backward()
    if DDP:
        opt.step()
    else:
        for p in model.parameters():
            dist.all_reduce(p.grad)
    if step == start + 1:
        stamp("first")
    if rank == 0:
        torch.save({"model": model.state_dict(), "step": step,
                    "opt": opt.state_dict() if DDP else None}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    dist.barrier()
    time.sleep(0.2)
dist.destroy_process_group()
'''

STOPPER = r'''
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
open(os.path.join(sys.argv[1], "up_" + os.environ["RANK"]), "w").close()
while True:
    time.sleep(0.05)
'''


# kill -> the script's first line; -> torch imported; -> init_process_group back; -> the
# model (DDP) built; -> the checkpoint loaded; -> the first step done
PHASES = ("line", "import", "init", "model", "load", "step")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("OPENMPI_", "OMPI_COMM", "PMIX_", "MA_", "VC_"))}


def restart_trial(kind: str, mpirun: str, work: str, stock: bool = False):
    out = tempfile.mkdtemp(dir=work)
    script = os.path.join(work, "train.py")
    if kind in ("mpilaunch", "nolearn", "fresh", "freshnohold", "in-place", "relaunch"):
        argv = [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "2",
                "--no-scheduler", "--master_port", "0", "--max_restarts", "1",
                "--log_dir", os.path.join(out, "logs"), script, out]
        if kind not in ("mpilaunch", "nolearn", "fresh", "freshnohold"):
            argv[-2:-2] = ["--restart-mode", kind]
    else:
        torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
        argv = [torchrun, "--standalone", "--nnodes", "1", "--nproc-per-node", "2",
                "--max-restarts", "1", script, out] + (["--stock"] if stock else [])
    t0 = time.time()
    import psutil

    log = os.path.join(out, "launcher.err")
    with open(log, "w") as errf:
        env = _env()
        if kind == "nolearn":    # the spare imports the script's heavy modules only
            env["MPILAUNCH_SPARE_LEARN"] = "0"
        if kind in ("fresh", "freshnohold"):    # no spare: every restarted worker is fresh
            env["MPILAUNCH_SPARE_PRELOAD"] = ""
        if kind == "freshnohold":     # and no store holder: rank 0's worker makes its store
            env["MPILAUNCH_STORE_HOLD"] = "0"
        proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf)
    seen = {}
    end = time.monotonic() + 120        # torchrun's workers run in sessions of their own and
    while proc.poll() is None and time.monotonic() < end:   # were seen to hang after a restart
        try:
            for c in psutil.Process(proc.pid).children(recursive=True):
                seen.setdefault(c.pid, c)
        except psutil.Error:
            pass
        time.sleep(0.1)
    if proc.poll() is None:
        proc.kill()
        print(f"  {kind}: still running after 120 s: killed", flush=True)
    left = []
    for c in seen.values():
        try:
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE:
                left.append(c.pid)
        except psutil.Error:
            pass
    if left:
        print(f"  {kind}: {len(left)} process(es) it started outlived it: killed", flush=True)
    for c in seen.values():     # only what this trial started
        try:
            c.kill()
        except psutil.Error:
            pass
    proc.wait()

    class r:
        returncode, stderr = proc.returncode, open(log).read()

    if os.environ.get("MPILAUNCH_DEBUG_SPARE"):    # what each rank's adapter did with its spare
        for ln in r.stderr.splitlines():
            if (": spare " in ln and "primed" not in ln or "restarted in place in" in ln
                    or "'s store " in ln):
                print(f"  {kind}: {ln.strip()}", flush=True)

    def read(name):
        with open(os.path.join(out, name)) as f:
            return float(f.read())
    try:
        killed = read("killed")
        first0 = max(read(f"first_0_{r_}") for r_ in (0, 1))
        first1 = max(read(f"first_1_{r_}") for r_ in (0, 1))
        line1 = max(read(f"line_1_{r_}") for r_ in (0, 1))
        # attempt 1, the latest rank's: kill -> script's first line -> torch imported ->
        # init_process_group back -> model (DDP) built -> checkpoint loaded -> first step
        marks = [killed] + [max(read(f"{w}_1_{r_}") for r_ in (0, 1))
                            for w in ("line", "imported", "init", "model", "loaded", "first")]
        phases = [b - a for a, b in zip(marks, marks[1:])]
        # the first launch's rendezvous: the last rank's import -> the last init back (a
        # client that came before rank 0's store backed off)
        init0 = (max(read(f"init_0_{r_}") for r_ in (0, 1))
                 - max(read(f"imported_0_{r_}") for r_ in (0, 1)))
    except OSError:
        lines = r.stderr.strip().splitlines()
        why = ([ln for ln in lines if "connectFullMesh failed" in ln][-1:]
               or [ln for ln in lines if "Error:" in ln][-1:])
        print(f"  {kind}: no restarted step (rc {r.returncode}): "
              + " | ".join(why or lines[-3:])[-400:], flush=True)
        return None
    # rank 0's adapter says whether the restart's store was held (MPILAUNCH_DEBUG_SPARE only)
    held = ("held" if "'s store held by" in r.stderr else
            "not held" if "'s store not held" in r.stderr else None)
    return first1 - killed, first0 - t0, line1 - killed, first1 - line1, phases, init0, held


def floor_trial() -> float:
    """A fresh interpreter importing what the script imports before its first line of work:
    what a restart costs at least without an interpreter started beforehand."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", "import torch, torch.distributed"], check=True,
                   env=_env(), stdin=subprocess.DEVNULL)
    return time.monotonic() - t0


def stop_trial(grace, mpirun: str, work: str):
    out = tempfile.mkdtemp(dir=work)
    script = os.path.join(work, "stopper.py")
    argv = [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "2", "--no-scheduler",
            "--master_port", "0", "--log_dir", os.path.join(out, "logs")]
    if grace is not None:
        argv += ["--term-grace", str(grace)]
    import psutil

    proc = subprocess.Popen(argv + [script, out], env=_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(out, f"up_{r}")) for r in (0, 1)):
        if time.monotonic() > end:
            proc.kill()
            return None
        time.sleep(0.02)
    kids = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.wait()
    while any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE for k in kids):
        time.sleep(0.005)
    return time.monotonic() - t0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--mpirun", default=os.path.join(os.path.dirname(sys.executable), "mpirun"))
    p.add_argument("--kinds", default="mpilaunch,torchrun",
                   help="restart trials: mpilaunch (its default mode, in place), nolearn "
                   "(in place, MPILAUNCH_SPARE_LEARN=0: the spare imports torch only), fresh (in "
                   "place, no spare: fresh workers), freshnohold (fresh, and no store holder: "
                   "MPILAUNCH_STORE_HOLD=0), relaunch "
                   "(--restart-mode relaunch), in-place (the flag given), torchrun; comma list, "
                   "interleaved")
    p.add_argument("--kill-step", type=int, default=4,
                   help="the step of attempt 0 at which rank 1 SIGKILLs itself (default 4)")
    p.add_argument("--no-stop", action="store_true", help="skip the stop-latency trials")
    p.add_argument("--settle", type=float, default=0.0,
                   help="seconds attempt 0 runs before the kill at --kill-step (default 0: ~0.6 s "
                   "after its first step); the in-place spare may be still importing then")
    p.add_argument("--workload", choices=("linear", "ddp"), default="linear",
                   help="linear: a bare Linear, gradients all-reduced by hand; ddp: "
                   "DistributedDataParallel, SGD, its state in the checkpoint (torch.load)")
    p.add_argument("--stock", action="store_true",
                   help="also run torchrun once on the script without the per-attempt store keys")
    a = p.parse_args()
    os.environ["BENCH_SETTLE"] = str(a.settle)     # the script reads them (every launcher)
    os.environ["BENCH_KILL_STEP"] = str(a.kill_step)
    os.environ["BENCH_WORKLOAD"] = a.workload
    work = tempfile.mkdtemp(prefix="bench-restart-")
    with open(os.path.join(work, "train.py"), "w") as f:
        f.write(TRAIN)
    with open(os.path.join(work, "stopper.py"), "w") as f:
        f.write(STOPPER)
    print(f"# mpirun {a.mpirun}; load {os.getloadavg()[0]:.2f}; {os.cpu_count()} cores; "
          f"settle {a.settle:g} s; workload {a.workload}; kill at step {a.kill_step}")
    if a.stock:
        got = restart_trial("torchrun", a.mpirun, work, stock=True)
        print("torchrun --standalone --max-restarts 1, stock init_process_group: "
              + (f"restarted, first step {got[0]:.3f} s after the kill" if got else
                 "no restarted step (see the line above)"), flush=True)
    kinds = a.kinds.split(",")
    res = {k: [] for k in kinds}
    fresh = {k: [] for k in kinds}
    parts = {k: [] for k in kinds}     # (kill -> the script's first line, that line -> first step)
    floor = []
    pairs = []
    for i in range(a.trials):
        order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]    # rotated every trial
        row = {}
        for kind in order:
            got = restart_trial(kind, a.mpirun, work)
            if got:
                res[kind].append(got[0])
                fresh[kind].append(got[1])
                parts[kind].append(got[2:])
                row[kind] = got[0]
                print(f"trial {i} {kind:9s} SIGKILL -> first step after restart {got[0]:.3f} s "
                      f"(-> script's first line {got[2]:.3f}, its re-init {got[3]:.3f}: "
                      + " ".join(f"{n} {t:.3f}" for n, t in zip(PHASES, got[4]))
                      + f"); fresh launch -> first step {got[1]:.3f} s (its init {got[5]:.3f})",
                      flush=True)
        floor.append(floor_trial())
        pairs.append(row)
        print(f"trial {i} floor: a fresh interpreter importing torch, torch.distributed "
              f"{floor[-1]:.3f} s; load {os.getloadavg()[0]:.2f}", flush=True)
    for kind in res:
        if res[kind]:
            ph = [statistics.median(p[2][j] for p in parts[kind]) for j in range(len(PHASES))]
            print(f"restart {kind}: phases (medians, the latest rank's): "
                  + ", ".join(f"{n} {t:.3f}" for n, t in zip(PHASES, ph)))
            inits = sorted(round(p[2][2], 3) for p in parts[kind])
            print(f"restart {kind}: init_process_group after the restart, every trial: {inits}; "
                  f"at the first launch: {sorted(round(p[3], 3) for p in parts[kind])}")
            for how in ("held", "not held"):    # rank 0's store holder (rank/inplace/hold.py)
                got_how = sorted(round(p[2][2], 3) for p in parts[kind] if p[4] == how)
                if got_how:
                    print(f"restart {kind}: store {how} in {len(got_how)} of "
                          f"{len(parts[kind])}: init {got_how}")
            print(f"restart {kind}: median {statistics.median(res[kind]):.3f} s "
                  f"(min {min(res[kind]):.3f}, n={len(res[kind])}): kill -> the script's first "
                  f"line {statistics.median(p[0] for p in parts[kind]):.3f} s, then the worker's "
                  f"re-init {statistics.median(p[1] for p in parts[kind]):.3f} s; fresh launch "
                  f"median {statistics.median(fresh[kind]):.3f} s")
    print(f"floor (python -c 'import torch, torch.distributed'): median "
          f"{statistics.median(floor):.3f} s (min {min(floor):.3f})")
    if "torchrun" in res and res["torchrun"]:
        base = statistics.median(res["torchrun"])
        for kind in res:
            if kind != "torchrun" and res[kind]:
                won = sum(1 for r in pairs if kind in r and "torchrun" in r
                          and r[kind] < r["torchrun"])
                print(f"{kind} / torchrun: {statistics.median(res[kind]) / base:.2f}x "
                      f"(faster in {won} of {sum(1 for r in pairs if kind in r and 'torchrun' in r)} pairs)")
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    if a.no_stop:
        shutil.rmtree(work, ignore_errors=True)
        return 0
    stops = {"--term-grace 5": [], "no grace": []}
    for i in range(a.trials):
        for name, grace in (("--term-grace 5", 5), ("no grace", None)):
            t = stop_trial(grace, a.mpirun, work)
            if t is not None:
                stops[name].append(t)
                print(f"trial {i} SIGTERM -> all gone, {name}: {t:.3f} s", flush=True)
    for name, ts in stops.items():
        if ts:
            print(f"stop {name}: median {statistics.median(ts):.3f} s (min {min(ts):.3f})")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
