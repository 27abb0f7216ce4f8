"""The live monitor's cost to a real DDP job (docs/MONITOR.md, "Overhead"): the step time of a
4-rank DistributedDataParallel job on gloo (bench/workloads/ddp_steps.py, oversubscribed on this
host's cores) with the monitor at its default interval against ``--sample-interval 0`` (off),
for a shallow model and one whose forward runs ``--depth`` modules deep; and the CPU the monitor
spends per rank, measured on the job's own worker.

* **Step time**: runs interleaved (off, on, off, on, ...), each ``--skip + --window`` s of
  steps; the first ``--skip`` s are left out (start-up, and the first interval and a half,
  before which no py-spy runs). A run's figure is the mean step of its window (the job's
  throughput: py-spy's bursts included) of its slowest rank; the table gives the median over
  the rounds of each variant, and on/off.
* **CPU per rank**: while a monitor-off job runs, this script runs the monitor's own commands
  against its rank 1 worker: ``--records`` py-spy records (``record_argv`` of
  mpilaunch/rank/monitor.py, as long as at the default interval, at its rate), each one's CPU
  from ``wait4``, and the thread-state reads (``States.sample``) at the rate the adapter makes
  them, by ``process_time``; their sum per interval, per second of the job, and against the
  CPU the worker itself spent over the same time (``/proc/PID/stat``).

    python3 bench/bench_monitor_ddp.py [--rounds 3] [--skip 20] [--window 40] [--depth 60]
                                       [--records 8] [--out FILE.json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

sys.path.insert(0, common.REPO)
from mpilaunch.config.options import DEFAULT_MONITOR_INTERVAL  # noqa: E402
from mpilaunch.rank import monitor, watchdog  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "ddp_steps.py")


def start_job(interval: float, seconds: float, depth: int, work: str) -> subprocess.Popen:
    argv = [common.PY, "-m", "mpilaunch", "-np", "4", "--oversubscribe", "--no-scheduler",
            "--master_port", "0", "--sample-interval", f"{interval:g}", "--log_dir",
            os.path.join(work, "logs"), WORKLOAD, work, str(seconds), str(depth)]
    env = dict(common.base_env(), OMP_NUM_THREADS="1")
    return subprocess.Popen(argv, env=env, cwd=work, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def step_means(work: str, skip: float) -> dict:
    ranks = []
    for rank in range(4):
        with open(os.path.join(work, f"steps_{rank}.txt")) as f:
            ranks.append([(float(t), float(d)) for _, t, d in (line.split() for line in f)])
    start = min(steps[0][0] for steps in ranks) + skip
    per_rank = [[d for t, d in steps if t >= start] for steps in ranks]
    means = [sum(d) / len(d) for d in per_rank]
    slow = max(range(4), key=lambda k: means[k])
    return {"mean": means[slow], "median": statistics.median(per_rank[slow]),
            "steps": len(per_rank[slow])}


def run_job(interval: float, skip: float, window: float, depth: int) -> dict:
    work = tempfile.mkdtemp(prefix=f"bench-monitor-ddp-{interval:g}-")
    try:
        proc = start_job(interval, skip + window, depth, work)
        _, err = proc.communicate(timeout=skip + window + 300)
        if proc.returncode != 0:
            raise RuntimeError(f"exit {proc.returncode}: {err[-2000:]}")
        return step_means(work, skip)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def worker_pid(work: str, rank: int, timeout: float = 120) -> int:
    """The pid of the job's worker of ``rank`` (its RANK in /proc/PID/environ), once stepping."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(os.path.join(work, f"steps_{rank}.txt")):
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmd = f.read().split(b"\0")
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        env = f.read().split(b"\0")
                except OSError:
                    continue
                if (any(c.endswith(b"ddp_steps.py") for c in cmd[1:2])
                        and f"RANK={rank}".encode() in env):
                    return pid
        time.sleep(0.5)
    raise RuntimeError("no worker")


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_per_rank(records: int, depth: int) -> dict:
    py_spy = watchdog.find_py_spy(os.environ.get("PATH"))
    interval = DEFAULT_MONITOR_INTERVAL
    seconds = max(1, int(interval * monitor.RECORD_SHARE))
    work = tempfile.mkdtemp(prefix="bench-monitor-ddp-cpu-")
    proc = start_job(0, 20 + records * (seconds + 3), depth, work)
    try:
        pid = worker_pid(work, 1)
        time.sleep(5)
        spy, reads, worker = [], [], []
        states = monitor.States()
        for k in range(records):
            out = os.path.join(work, f"r{k}.raw")
            w0 = proc_cpu(pid)
            p = subprocess.Popen(monitor.record_argv(py_spy, pid, seconds, monitor.RATE, out),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t_read, n_read, t_wall = 0.0, 0, time.monotonic()
            while True:
                done, _, ru = os.wait4(p.pid, os.WNOHANG)    # its own CPU, by wait4
                if done:
                    p.returncode = 0
                    break
                t = time.process_time()
                states.sample(pid)
                t_read += time.process_time() - t
                n_read += 1
                time.sleep(1.0 / monitor.RATE)
            wall = time.monotonic() - t_wall
            spy.append(ru.ru_utime + ru.ru_stime)
            reads.append(t_read / max(n_read, 1))
            worker.append((proc_cpu(pid) - w0) / wall)
        with open(out) as f:
            frames = max((line.count(";") for line in f), default=0)
    finally:
        proc.wait(timeout=600)
        shutil.rmtree(work, ignore_errors=True)
    record = statistics.median(spy)
    read = statistics.median(reads)
    per_interval = record + read * monitor.RATE * interval
    busy = statistics.median(worker)    # the worker's own CPU, cores, while sampled
    return {"interval": interval, "record_seconds": seconds, "frames": frames,
            "py_spy_record_cpu": common.stats(spy), "state_read_cpu": read,
            "per_interval": per_interval, "per_second": per_interval / interval,
            "worker_cores": busy, "share_of_worker": per_interval / interval / busy}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", type=float, default=20.0)
    ap.add_argument("--window", type=float, default=40.0)
    ap.add_argument("--depth", type=int, default=60)
    ap.add_argument("--records", type=int, default=8)
    ap.add_argument("--out")
    args = ap.parse_args()
    on = DEFAULT_MONITOR_INTERVAL
    result = {"machine": common.machine(), "load": {"start": common.loadavg()}, "cpu": {},
              "steps": {}}
    for depth in (0, args.depth):
        cpu = cpu_per_rank(args.records, depth)
        result["cpu"][depth] = cpu
        print(f"depth {depth} ({cpu['frames']} frames a stack): one py-spy record of "
              f"{cpu['record_seconds']} s {cpu['py_spy_record_cpu']['median'] * 1e3:.1f} ms CPU "
              f"(median of {args.records}, {cpu['py_spy_record_cpu']['min'] * 1e3:.1f}-"
              f"{cpu['py_spy_record_cpu']['max'] * 1e3:.1f}), a thread-state read "
              f"{cpu['state_read_cpu'] * 1e6:.0f} us; per rank {cpu['per_second'] * 1e3:.2f} ms "
              f"CPU a second, {100 * cpu['share_of_worker']:.2f}% of the worker's own CPU "
              f"({cpu['worker_cores']:.2f} cores)", flush=True)
    for depth in (0, args.depth) if args.rounds else ():
        got = {0.0: [], on: []}
        for rnd in range(args.rounds):
            for v in (0.0, on):
                res = run_job(v, args.skip, args.window, depth)
                got[v].append(res)
                print(f"depth {depth} round {rnd + 1}/{args.rounds} interval {v:g}: mean step "
                      f"{res['mean'] * 1e3:.3f} ms, median {res['median'] * 1e3:.3f} ms, "
                      f"{res['steps']} steps, load {common.loadavg()}", flush=True)
        off_m = statistics.median(r["mean"] for r in got[0.0])
        on_m = statistics.median(r["mean"] for r in got[on])
        result["steps"][depth] = {"off": got[0.0], "on": got[on], "ratio": on_m / off_m}
        print(f"depth {depth}: mean step off {off_m * 1e3:.3f} ms, on ({on:g} s) "
              f"{on_m * 1e3:.3f} ms: {on_m / off_m:.4f}x (medians of {args.rounds})", flush=True)
    result["load"]["end"] = common.loadavg()
    print(f"load average: start {result['load']['start']}, end {result['load']['end']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
