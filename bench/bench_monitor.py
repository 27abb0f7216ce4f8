"""The live monitor's cost to the job it watches (docs/MONITOR.md): the step time of a 4-rank
torch/gloo job (bench/workloads/gloo_steps.py, oversubscribed on this host's cores) with each
rank's adapter sampling at ``--sample-interval S`` against ``--sample-interval 0`` (off).

Runs are interleaved (off, S1, S2, off, S1, S2, ...). Every run lasts ``--skip + --window``
seconds of steps; the first ``--skip`` seconds (start-up, and the first interval, before which
no py-spy runs) are left out, and the step time of a run is the mean of its window's steps
(the job's throughput: total time / steps, py-spy's start-up bursts included) of the slowest
rank, with the median step beside it. The figure is the median over the rounds of each
variant's mean, and its ratio to off. The load average is recorded at the start and end.

    python3 bench/bench_monitor.py [--intervals 10,30] [--rounds 3] [--skip 32] [--window 60]
                                   [--out FILE.json]
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

SAMPLES_AT_10S = 60     # the stack samples of one record at a 10 s interval (6 s at 10 a second)
WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workloads", "gloo_steps.py")


def run_job(interval: float, skip: float, window: float) -> dict:
    """One job; its window's step times: {"mean": s, "median": s, "steps": n, "spies": n}."""
    work = tempfile.mkdtemp(prefix=f"bench-monitor-{interval:g}-")
    try:
        argv = [common.PY, "-m", "mpilaunch", "-np", "4", "--oversubscribe", "--no-scheduler",
                "--master_port", "0", "--sample-interval", f"{interval:g}", "--log_dir",
                os.path.join(work, "logs"), WORKLOAD, work, str(skip + window)]
        env = dict(common.base_env(), OMP_NUM_THREADS="1")
        r = subprocess.run(argv, env=env, cwd=work, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=skip + window + 300)
        if r.returncode != 0:
            raise RuntimeError(f"exit {r.returncode}: {r.stderr[-2000:]}")
        ranks = []
        for rank in range(4):
            with open(os.path.join(work, f"steps_{rank}.txt")) as f:
                ranks.append([(float(t), float(d)) for _, t, d in (line.split() for line in f)])
        start = min(steps[0][0] for steps in ranks) + skip
        per_rank = [[d for t, d in steps if t >= start] for steps in ranks]
        means = [sum(d) / len(d) for d in per_rank if d]
        slow = max(range(4), key=lambda k: means[k])
        return {"mean": means[slow], "median": statistics.median(per_rank[slow]),
                "steps": len(per_rank[slow])}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cpu_per_interval(records: int) -> dict:
    """What one rank's monitor costs in CPU per interval, measured without the noise of the
    machine's load on wall times: ``records`` py-spy records (the monitor's own command,
    ``record_argv`` of mpilaunch/rank/monitor.py, 2 s each) of a process that has imported
    torch, each one's CPU from ``wait4``; and one tick's own work (``/proc`` reads of a process
    tree, the parse and the summary of a real record) timed with ``process_time``."""
    sys.path.insert(0, common.REPO)
    from mpilaunch.rank import monitor, watchdog

    py_spy = watchdog.find_py_spy(os.environ.get("PATH"))
    if not py_spy:
        return {"skipped": "py-spy is not installed"}
    target = subprocess.Popen([common.PY, "-c", "import time, torch\nwhile True: time.sleep(0.01)"])
    work = tempfile.mkdtemp(prefix="bench-monitor-cpu-")
    try:
        time.sleep(10)      # torch imported
        spy, raw = [], ""
        for k in range(records):
            out = os.path.join(work, f"r{k}.raw")
            p = subprocess.Popen(monitor.record_argv(py_spy, target.pid, 2, monitor.RATE, out),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, _, ru = os.wait4(p.pid, 0)
            spy.append(ru.ru_utime + ru.ru_stime)
            with open(out) as f:
                raw = f.read()
        dump = []       # the alternative: one py-spy dump per stack sample
        for k in range(records):
            p = subprocess.Popen([py_spy, "dump", "--pid", str(target.pid), "--nonblocking"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, _, ru = os.wait4(p.pid, 0)
            dump.append(ru.ru_utime + ru.ru_stime)
        t0 = time.process_time()
        for _ in range(100):
            monitor.usage(target.pid)
            monitor.output_time(out)
            monitor.summarize(monitor.parse_raw(raw, target.pid))
        tick = (time.process_time() - t0) / 100
    finally:
        target.kill()
        target.wait()
        shutil.rmtree(work, ignore_errors=True)
    return {"py_spy_record_cpu": common.stats(spy), "py_spy_dump_cpu": common.stats(dump),
            "tick_cpu": tick}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--intervals", default="10,30")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", type=float, default=32.0)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--records", type=int, default=10)
    ap.add_argument("--out")
    args = ap.parse_args()
    cpu = cpu_per_interval(args.records)
    if "skipped" not in cpu:
        per = cpu["py_spy_record_cpu"]["median"] + cpu["tick_cpu"]
        print(f"one rank's monitor, per interval: py-spy record {cpu['py_spy_record_cpu']['median'] * 1e3:.1f} ms "
              f"CPU (median of {args.records}; min {cpu['py_spy_record_cpu']['min'] * 1e3:.1f}, max "
              f"{cpu['py_spy_record_cpu']['max'] * 1e3:.1f}), the tick itself {cpu['tick_cpu'] * 1e3:.2f} ms", flush=True)
        dump = cpu["py_spy_dump_cpu"]["median"]
        print(f"  a py-spy dump instead: {dump * 1e3:.1f} ms CPU each; {SAMPLES_AT_10S} of them "
              f"(a record's samples at 10 s) cost {dump * SAMPLES_AT_10S:.2f} s", flush=True)
        for s in (5, 10, 15, 20, 30, 60):
            print(f"  interval {s:>2} s: 4 ranks on {os.cpu_count()} cores lose "
                  f"{100 * 4 * per / (os.cpu_count() * s):.2f}% of the CPU", flush=True)
    if args.rounds == 0:
        return 0
    variants = [0.0] + [float(v) for v in args.intervals.split(",")]
    load = {"start": common.loadavg()}
    got = {v: [] for v in variants}
    for rnd in range(args.rounds):
        for v in variants:
            res = run_job(v, args.skip, args.window)
            got[v].append(res)
            print(f"round {rnd + 1}/{args.rounds} interval {v:g}: mean step "
                  f"{res['mean'] * 1e3:.3f} ms, median {res['median'] * 1e3:.3f} ms, "
                  f"{res['steps']} steps, load {common.loadavg()}", flush=True)
    load["end"] = common.loadavg()
    off = statistics.median(r["mean"] for r in got[0.0])
    table = {}
    print(f"\n| --sample-interval | mean step (median of {args.rounds}) | median step | ratio to off |")
    print("|---|---|---|---|")
    for v in variants:
        mean = statistics.median(r["mean"] for r in got[v])
        med = statistics.median(r["median"] for r in got[v])
        table[f"{v:g}"] = {"mean_step": mean, "median_step": med, "ratio": mean / off,
                           "runs": got[v]}
        print(f"| {v:g} | {mean * 1e3:.3f} ms | {med * 1e3:.3f} ms | {mean / off:.4f} |")
    print(f"\nload average: start {load['start']}, end {load['end']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"load": load, "skip": args.skip, "window": args.window,
                       "variants": table, "cpu": cpu}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
