"""Stacks on demand (docs/HANGS.md): what ``mpilaunch stacks LOG_DIR`` costs.

1. **Time to the verdict** at N ranks on this host (oversubscribed): one job per N whose rank 1
   waits in ``load_batch`` while every other rank waits in ``wait_for_peers`` (plain Python,
   so that 64 ranks fit on 2 cores), then ``mpilaunch stacks`` R times against it; the wall time
   of the command, from its start to its exit with the verdict printed. The sizes run one after
   the other (a job per size), not interleaved: each figure is the median of its R runs.
   The same at H namespace test hosts (tests/helpers/hosts, root only), one rank on each, the
   launcher and the command inside host 1.
2. **Step time of a running job** with and without a dump: a 4-rank torch/gloo job that times
   each step (a 256x256 matmul and an all_reduce of the result), in interleaved rounds: once
   untouched, once with ``mpilaunch stacks`` every DUMP_EVERY steps; the step time (the slowest
   rank's) of the steps a dump overlapped, of the others, and of the untouched runs, medians.

    python3 bench/bench_stacks.py [--sizes 4,16,64] [--hosts 16] [--runs 5] [--steps 400] [--rounds 3]
                                  [--out FILE.json]

Prints a table and writes the figures as JSON. The load average is recorded at the start and
the end (bench/common.py).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

WAITER = r'''
import os, sys, time
out = sys.argv[1]
rank = int(os.environ["RANK"])


def load_batch():
    while not os.path.exists(os.path.join(out, "release")):
        time.sleep(0.2)


def wait_for_peers():
    while not os.path.exists(os.path.join(out, "release")):
        time.sleep(0.2)


open(os.path.join(out, f"up_{rank}"), "w").close()
load_batch() if rank == 1 else wait_for_peers()
'''

STEPPER = r'''
import datetime, os, sys, time
import torch
import torch.distributed as dist
out, steps = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
torch.set_num_threads(1)
a = torch.rand(256, 256)
with open(os.path.join(out, f"steps_{rank}.txt"), "w", buffering=1) as f:
    for i in range(steps):
        t0 = time.monotonic()
        x = a @ a
        dist.all_reduce(x)
        f.write(f"{i} {t0:.6f} {time.monotonic() - t0:.6f}\n")
dist.destroy_process_group()
'''
DUMP_EVERY = 50


def launch(script: str, np: int, work: str, *args: str) -> subprocess.Popen:
    path = os.path.join(work, "job.py")
    with open(path, "w") as f:
        f.write(script)
    argv = [common.PY, "-m", "mpilaunch", "-np", str(np), "--oversubscribe", "--no-scheduler",
            "--master_port", "0", "--log_dir", os.path.join(work, "logs"), path, work, *args]
    return subprocess.Popen(argv, env=common.base_env(), cwd=work, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait(pred, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def stacks(log_dir: str):
    t0 = time.monotonic()
    r = subprocess.run([common.PY, "-m", "mpilaunch", "stacks", log_dir], env=common.base_env(),
                       capture_output=True, text=True, timeout=300)
    return time.monotonic() - t0, r


def time_to_verdict(np: int, runs: int) -> dict:
    work = tempfile.mkdtemp(prefix=f"bench-stacks-{np}-")
    proc = launch(WAITER, np, work)
    try:
        wait(lambda: all(os.path.exists(os.path.join(work, f"up_{r}")) for r in range(np))
             and os.path.exists(os.path.join(work, "logs", ".mpilaunch-stacks")), 300, f"{np} ranks up")
        times, verdict = [], None
        for _ in range(runs):
            took, r = stacks(os.path.join(work, "logs"))
            if r.returncode != 0:
                raise RuntimeError(r.stdout + r.stderr)
            times.append(took)
            verdict = r.stdout.splitlines()[-1]
    finally:
        open(os.path.join(work, "release"), "w").close()
        proc.wait(120)
        shutil.rmtree(work, ignore_errors=True)
    return {"np": np, "wall": common.stats(times), "verdict": verdict}


HOSTS_PREFIX = "mlk"     # the namespace hosts of this bench (tests/helpers/hosts), removed after


def time_to_verdict_on_hosts(n: int, runs: int) -> dict:
    """As :func:`time_to_verdict`, one rank on each of ``n`` namespace test hosts (the launcher
    and the command inside host 1, as worker-0 runs them)."""
    sys.path.insert(0, os.path.join(common.REPO, "tests"))
    from helpers.hosts import hostset

    why = hostset.missing_prereqs()
    if why:
        return {"hosts": n, "skipped": why}
    desc = hostset.up(n, HOSTS_PREFIX, None, os.getpid(), verify=True, quiet=True)
    work = tempfile.mkdtemp(prefix=f"bench-stacks-hosts{n}-")
    try:
        h1 = desc["hosts"][0]
        inside = ["nsenter", "-t", str(h1["sshd_pid"]), "-u", "--", "ip", "netns", "exec", h1["netns"]]
        hf = os.path.join(work, "hostfile")
        with open(hf, "w") as f:
            f.writelines(f"{h['addr']} slots=1\n" for h in desc["hosts"])
        path = os.path.join(work, "job.py")
        with open(path, "w") as f:
            f.write(WAITER)
        log = os.path.join(work, "logs")
        argv = inside + [common.PY, "-m", "mpilaunch", "--hostfile", hf, "--ssh-args",
                         f"-F {desc['ssh_config']}", "--no-scheduler", "--master_port", "0",
                         "--log_dir", log, path, work]
        proc = subprocess.Popen(argv, env=common.base_env(), cwd=work, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait(lambda: all(os.path.exists(os.path.join(work, f"up_{r}")) for r in range(n))
                 and os.path.exists(os.path.join(log, ".mpilaunch-stacks")), 300, f"{n} hosts up")
            times, verdict = [], None
            for _ in range(runs):
                t0 = time.monotonic()
                r = subprocess.run(inside + [common.PY, "-m", "mpilaunch", "stacks", log],
                                   env=common.base_env(), capture_output=True, text=True, timeout=300)
                if r.returncode != 0:
                    raise RuntimeError(r.stdout + r.stderr)
                times.append(time.monotonic() - t0)
                verdict = r.stdout.splitlines()[-1]
        finally:
            open(os.path.join(work, "release"), "w").close()
            proc.wait(120)
        return {"hosts": n, "wall": common.stats(times), "verdict": verdict}
    finally:
        hostset.down(HOSTS_PREFIX, force=True)
        shutil.rmtree(work, ignore_errors=True)


def read_steps(work: str, np: int):
    out = []
    for r in range(np):
        with open(os.path.join(work, f"steps_{r}.txt")) as f:
            out.append([(int(i), float(t), float(d)) for i, t, d in (line.split() for line in f)])
    return out


def step_times(steps: int, rounds: int = 1) -> dict:
    """``rounds`` of (untouched, dumped) jobs, interleaved; every step of every round pooled."""
    pooled = {m: {"all": [], "hit": [], "rest": [], "dumps": 0} for m in ("untouched", "dumped")}
    for _ in range(rounds):
        for mode, v in one_round(steps).items():
            for k in ("all", "hit", "rest"):
                pooled[mode][k] += v[k]
            pooled[mode]["dumps"] += v["dumps"]
    return {m: {"all": common.stats(v["all"]), "overlapping_a_dump": common.stats(v["hit"]),
                "other_steps": common.stats(v["rest"]), "dumps": v["dumps"]}
            for m, v in pooled.items()}


def one_round(steps: int) -> dict:
    res = {}
    for mode in ("untouched", "dumped"):
        work = tempfile.mkdtemp(prefix=f"bench-steps-{mode}-")
        proc = launch(STEPPER, 4, work, str(steps))
        windows = []
        try:
            if mode == "dumped":
                log = os.path.join(work, "logs")
                done = 0
                while proc.poll() is None:
                    try:
                        n = sum(1 for _ in open(os.path.join(work, "steps_0.txt")))
                    except OSError:
                        n = 0
                    if n >= (done + 1) * DUMP_EVERY and n < steps - DUMP_EVERY:
                        t0 = time.monotonic()
                        took, r = stacks(log)
                        if r.returncode == 0:
                            windows.append((t0, t0 + took))
                        done += 1
                    time.sleep(0.02)
            if proc.wait(600) != 0:
                raise RuntimeError(proc.stderr.read())
        finally:
            if proc.poll() is None:
                proc.kill()
        ranks = read_steps(work, 4)
        shutil.rmtree(work, ignore_errors=True)
        per_step = [max(r[i][2] for r in ranks) for i in range(steps)]   # the slowest rank's
        starts = [min(r[i][1] for r in ranks) for i in range(steps)]
        hit = [i for i in range(steps) if any(a - per_step[i] <= starts[i] <= b for a, b in windows)]
        rest = [per_step[i] for i in range(10, steps) if i not in hit]
        res[mode] = {"all": per_step[10:], "hit": [per_step[i] for i in hit], "rest": rest,
                     "dumps": len(windows)}
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4,16,64")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the step-time jobs")
    ap.add_argument("--hosts", type=int, default=16, help="namespace test hosts, one rank each (0: none)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    result = {"load_start": common.loadavg(), "verdict": [], "steps": None}
    for np in [int(x) for x in args.sizes.split(",") if x]:
        r = time_to_verdict(np, args.runs)
        result["verdict"].append(r)
        print(f"N={np:3d}: command to verdict median {r['wall']['median']:.3f} s "
              f"(min {r['wall']['min']:.3f}, max {r['wall']['max']:.3f}, n={r['wall']['n']}): "
              f"{r['verdict'][:100]}", flush=True)
    if args.hosts:
        r = time_to_verdict_on_hosts(args.hosts, args.runs)
        result["hosts"] = r
        print(f"{args.hosts} namespace hosts: " + (f"skipped: {r['skipped']}" if "skipped" in r else
              f"command to verdict median {r['wall']['median']:.3f} s (min {r['wall']['min']:.3f}, "
              f"max {r['wall']['max']:.3f}, n={r['wall']['n']}): {r['verdict'][:100]}"), flush=True)
    if args.steps:
        s = step_times(args.steps, args.rounds)
        result["steps"] = s
        for mode, v in s.items():
            print(f"steps {mode:9s}: median {v['all']['median'] * 1000:.2f} ms; steps a dump "
                  f"overlapped: {fmt(v['overlapping_a_dump'])}; other steps: {fmt(v['other_steps'])}"
                  f" ({v['dumps']} dumps)", flush=True)
    result["load_end"] = common.loadavg()
    print(f"load average: start {result['load_start']}, end {result['load_end']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


def fmt(s: dict) -> str:
    return f"{s['median'] * 1000:.2f} ms (n={s['n']})" if s.get("n") else "none"


if __name__ == "__main__":
    sys.exit(main())
