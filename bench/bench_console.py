"""The console of a job with many ranks (docs/LOGS.md): what it shows and what it costs.

1. **Console bytes and lines** at N ranks on this host (oversubscribed), each printing the same
   150-line configuration dump and 20 lines of its own (one every 100 ms, each carrying the time
   it was printed): mpilaunch as it is (collapsing on, the budget on), mpilaunch with both off
   (the console before), bare ``mpirun --tag-output``, ``torchrun`` (its default console: the
   workers' lines unprefixed) and ``torchrun --tee 3`` (each line prefixed). Interleaved rounds;
   per variant the medians of the console's bytes and lines, the wall time, the launcher
   process's own CPU (mpilaunch and torchrun: getrusage(RUSAGE_SELF) at its end, its threads
   included, its children not), and the delay a unique line sees (its arrival on the console,
   read through a pipe, minus the time it was printed: median and max over every rank's lines).
   ``--barrier`` makes every rank wait for all before its dump (as after init_process_group).
2. **The skew the window must cover**: with collapsing off, for each dump line, the time from
   the first rank's copy to the last's on the console (median and max over the 150 lines):
   a window longer than that shows the dump once.
4. **A plain launch** (``--plain-rounds R``): 4 ranks printing one line each, the launcher's own
   CPU and the wall time with the console's collapsing and budget on (the default) and off,
   interleaved, medians: what the feature costs a launch that does not need it.
3. **The collapser alone at 1024 ranks** (output/console.py's Collapser, in this process): a
   stream of 1024 ranks' dumps (150 lines, each rank's block whole, the ranks in random order)
   and 10 own lines each, arriving at 16000 lines/s and shown every 64 lines; CPU per input
   line and the peak memory it holds (tracemalloc, a second pass), and the same for a stream
   of lines all different (nothing to collapse: its worst case).

5. **Across namespace test hosts** (``--hosts H --slots S``, root only): section 1's two
   mpilaunch variants with S ranks on each of H hosts (tests/helpers/hosts), the launcher in
   host 1.

    python3 bench/bench_console.py [--np 48] [--runs 3] [--barrier] [--plain-rounds R]
                                   [--hosts H --slots S] [--out FILE.json]

Prints a table and writes the figures as JSON; the load average at the start and the end
(bench/common.py).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import common  # noqa: E402

from mpilaunch.output.console import Collapser  # noqa: E402

DUMP_LINES, OWN = 150, 20
RATE, CHUNK = 16000, 64   # section 3: lines a second into the collapser, lines per chunk read
WORKER = r'''
import os, sys, time
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
size = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
barrier = sys.argv[1]
if barrier != "-":
    open(os.path.join(barrier, str(rank)), "w").close()
    while len(os.listdir(barrier)) < size:
        time.sleep(0.01)
for i in range(%(dump)d):
    print(f"model.layers.{i:03d}.attention.config = dim=4096 heads=32 dropout=0.0 init=normal({i})")
sys.stdout.flush()
for i in range(%(own)d):
    time.sleep(0.1)
    print(f"rank {rank} step {i} loss={1.0 / (i + rank + 1):.6f} t={time.time():.6f}", flush=True)
''' % {"dump": DUMP_LINES, "own": OWN}

PROBE = ("import resource, sys\nfrom mpilaunch.cli import main\nrc = main(sys.argv[1:])\n"
         "r = resource.getrusage(resource.RUSAGE_SELF)\n"
         "sys.stderr.write(f'\\nLAUNCHER_CPU {r.ru_utime + r.ru_stime:.4f}\\n')\nsys.exit(rc)\n")
TORCH_PROBE = ("import resource, sys, runpy\nsys.argv = ['torchrun'] + sys.argv[1:]\n"
               "try:\n    runpy.run_module('torch.distributed.run', run_name='__main__')\n"
               "finally:\n    r = resource.getrusage(resource.RUSAGE_SELF)\n"
               "    sys.stderr.write(f'\\nLAUNCHER_CPU {r.ru_utime + r.ru_stime:.4f}\\n')\n")
T_FIELD = re.compile(rb"t=(\d+\.\d+)$")


def variants(np: int, script: str, barrier: str) -> "dict[str, list[str]]":
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    py = sys.executable
    launch = [py, "-c", PROBE, "--mpirun", mpirun, "-np", str(np), "--master_port", "0", "--log_dir"]
    return {
        "mpilaunch": launch + ["{logs}", script, barrier],
        "mpilaunch, collapse+budget off": launch + ["{logs}", "--console_collapse", "0", "--console_budget", "0",
                                                    script, barrier],
        "mpirun --tag-output": [mpirun, "--oversubscribe", "--tag-output", "-np", str(np), py, script, barrier],
        "torchrun": [py, "-c", TORCH_PROBE, "--nproc-per-node", str(np), "--master-port", "0", script, barrier],
        "torchrun --tee 3": [py, "-c", TORCH_PROBE, "--nproc-per-node", str(np), "--master-port", "0", "--tee", "3",
                             script, barrier],
    }


def run_one(argv: "list[str]", env: dict) -> dict:
    """Run ``argv``; every stdout line with the time it arrived; the launcher's CPU."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    arrivals: "list[tuple[float, bytes]]" = []
    err: "list[bytes]" = []
    t_err = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    t_err.start()
    for line in iter(proc.stdout.readline, b""):
        arrivals.append((time.time(), line))
    rc = proc.wait()
    t_err.join()
    wall = time.monotonic() - start
    cpu = re.findall(rb"LAUNCHER_CPU (\d+\.\d+)", err[0])
    return {"rc": rc, "wall": wall, "cpu": float(cpu[-1]) if cpu else None, "arrivals": arrivals,
            "stderr_tail": err[0][-300:].decode("utf-8", "replace")}


def figures(res: dict) -> dict:
    lines = [ln for _, ln in res["arrivals"]]
    delays = [t - float(m.group(1)) for t, ln in res["arrivals"] for m in [T_FIELD.search(ln.rstrip())] if m]
    spreads = []
    by_line: "dict[bytes, list[float]]" = {}
    for t, ln in res["arrivals"]:
        if b".attention.config" in ln:
            by_line.setdefault(ln[ln.index(b"model."):], []).append(t)
    for ts in by_line.values():
        spreads.append(max(ts) - min(ts))
    return {"bytes": sum(len(x) for x in lines), "lines": len(lines), "wall": res["wall"], "cpu": res["cpu"],
            "delay_median": statistics.median(delays) if delays else None,
            "delay_max": max(delays) if delays else None, "own_lines": len(delays),
            "skew_median": statistics.median(spreads) if spreads else None,
            "skew_max": max(spreads) if spreads else None, "rc": res["rc"]}


def console_section(np: int, runs: int, barrier_on: bool) -> dict:
    out: "dict[str, list[dict]]" = {}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "dump.py")
        with open(script, "w") as f:
            f.write(WORKER)
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        for r in range(runs):
            for name in variants(np, script, "-"):
                barrier = os.path.join(tmp, f"b{r}-{len(out.get(name, []))}-{abs(hash(name))}")
                if barrier_on:
                    os.mkdir(barrier)
                logs = os.path.join(tmp, f"logs{r}-{abs(hash(name))}")
                argv = [a.replace("{logs}", logs) for a in variants(np, script, barrier if barrier_on else "-")[name]]
                fig = figures(run_one(argv, env))
                out.setdefault(name, []).append(fig)
                print(f"  round {r} {name}: {fig['lines']} lines {fig['bytes']} B, cpu {fig['cpu']}, "
                      f"delay median {fig['delay_median']}, skew max {fig['skew_max']}", flush=True)
    return {name: {k: (statistics.median([f[k] for f in figs if f[k] is not None])
                       if any(f[k] is not None for f in figs) else None)
                   for k in figs[0]} for name, figs in out.items()}


def collapser_section(ranks: int = 1024, seed: int = 1) -> dict:
    rng = random.Random(seed)
    dump = [b"model.layers.%03d.attention.config = dim=4096 heads=32 dropout=0.0 init=normal(%d)\n" % (i, i)
            for i in range(DUMP_LINES)]
    order = list(range(ranks))
    rng.shuffle(order)
    alike = [b"[rank%d] %s" % (r, d) for r in order for d in dump]
    alike += [b"[rank%d] rank %d step %d loss=0.5\n" % (r, r, i) for i in range(10) for r in order]
    unique = [b"[rank%d] rank %d line %d of its own, nothing alike\n" % (r, r, i) for i in range(DUMP_LINES + 10)
              for r in order]
    out = {}
    for name, stream in (("alike", alike), ("unique", unique)):
        fig = {"input_lines": len(stream), "input_bytes": sum(map(len, stream))}
        for traced in (False, True):      # CPU without tracemalloc's cost; memory with it
            if traced:
                tracemalloc.start()
            c = Collapser(window=1.0, expected=ranks)
            shown, t0 = [], time.process_time()
            for k, line in enumerate(stream):   # arriving at RATE lines/s, shown every CHUNK lines
                c.add(line, k / RATE)
                if k % CHUNK == 0:
                    shown.append(c.take(k / RATE))
            shown.append(c.take(1e9, everything=True))
            cpu = time.process_time() - t0
            if traced:
                fig["peak_mem_bytes"] = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            else:
                text = b"".join(shown)
                fig.update(shown_lines=text.count(b"\n"), shown_bytes=len(text), cpu_s=cpu,
                           us_per_line=cpu / len(stream) * 1e6)
        out[name] = fig
    return out


def plain_section(rounds: int) -> dict:
    """A plain launch (4 ranks, one line each): the launcher's CPU and the wall time with the
    console's collapsing and budget on (the default) and off, interleaved, medians."""
    out: "dict[str, list[tuple[float, float]]]" = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "w.py")
        with open(script, "w") as f:
            f.write("import os; print('rank', os.environ['RANK'])\n")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1",
                   PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
        for r in range(rounds):
            for name, flags in (("on", []), ("off", ["--console_collapse", "0", "--console_budget", "0"])):
                argv = [sys.executable, "-c", PROBE, "--mpirun", mpirun, "-np", "4", "--master_port", "0",
                        "--log_dir", os.path.join(tmp, f"l{r}{name}"), *flags, script]
                res = run_one(argv, env)
                out[name].append((res["cpu"], res["wall"]))
    return {name: {"cpu": statistics.median(c for c, _ in v), "wall": statistics.median(w for _, w in v),
                   "rounds": len(v)} for name, v in out.items()}


HOSTS_PREFIX = "mlc"     # the namespace hosts of section 5 (tests/helpers/hosts), removed after


def hosts_section(n_hosts: int, slots: int, runs: int) -> dict:
    """Section 1's mpilaunch variants (on, off) with ``slots`` ranks on each of ``n_hosts``
    namespace test hosts, the launcher inside host 1 (as worker-0 runs it)."""
    sys.path.insert(0, os.path.join(common.REPO, "tests"))
    from helpers.hosts import hostset

    why = hostset.missing_prereqs()
    if why:
        return {"skipped": why}
    desc = hostset.up(n_hosts, HOSTS_PREFIX, None, os.getpid(), verify=True, quiet=True)
    work = tempfile.mkdtemp(prefix="bench-console-hosts-")
    out: "dict[str, list[dict]]" = {}
    try:
        h1 = desc["hosts"][0]
        inside = ["nsenter", "-t", str(h1["sshd_pid"]), "-u", "--", "ip", "netns", "exec", h1["netns"]]
        hf = os.path.join(work, "hostfile")
        with open(hf, "w") as f:
            f.writelines(f"{h['addr']} slots={slots}\n" for h in desc["hosts"])
        script = os.path.join(work, "dump.py")
        with open(script, "w") as f:
            f.write(WORKER)
        for r in range(runs):
            for name, flags in (("mpilaunch", []),
                                ("mpilaunch, collapse+budget off", ["--console_collapse", "0", "--console_budget", "0"])):
                argv = inside + [sys.executable, "-c", PROBE, "--hostfile", hf, "--ssh-args", f"-F {desc['ssh_config']}",
                                 "--no-scheduler", "--master_port", "0", "--log_dir", os.path.join(work, f"l{r}{len(flags)}"),
                                 *flags, script, "-"]
                fig = figures(run_one(argv, common.base_env()))
                out.setdefault(name, []).append(fig)
                print(f"  hosts round {r} {name}: {fig['lines']} lines {fig['bytes']} B, cpu {fig['cpu']}, "
                      f"rc {fig['rc']}", flush=True)
    finally:
        hostset.down(HOSTS_PREFIX, force=True)
    return {"hosts": n_hosts, "slots": slots,
            **{name: {k: (statistics.median([f[k] for f in figs if f[k] is not None])
                          if any(f[k] is not None for f in figs) else None) for k in figs[0]}
               for name, figs in out.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", type=int, default=48)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--barrier", action="store_true")
    ap.add_argument("--plain-rounds", type=int, default=0, help="section 4's rounds (0: skip)")
    ap.add_argument("--hosts", type=int, default=0, help="section 5: namespace test hosts (0: skip)")
    ap.add_argument("--slots", type=int, default=4, help="section 5: ranks on each host")
    ap.add_argument("--out")
    args = ap.parse_args()
    load0 = common.loadavg()
    result = {"np": args.np, "runs": args.runs, "barrier": args.barrier, "load_start": load0}
    result["collapser_1024"] = collapser_section()
    print(json.dumps(result["collapser_1024"], indent=1))
    if args.hosts:
        result["hosts"] = hosts_section(args.hosts, args.slots, max(1, args.runs))
        print(json.dumps(result["hosts"], indent=1))
    if args.plain_rounds:
        result["plain"] = plain_section(args.plain_rounds)
        print(json.dumps(result["plain"]))
    result["console"] = console_section(args.np, args.runs, args.barrier) if args.runs and args.np else {}
    result["load_end"] = common.loadavg()
    print(f"\n{'variant':34} {'lines':>7} {'bytes':>9} {'wall s':>7} {'cpu s':>6} {'delay med/max s':>16} "
          f"{'skew med/max s':>15}")
    for name, f in result["console"].items():
        fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{name:34} {f['lines']:>7.0f} {f['bytes']:>9.0f} {f['wall']:>7.2f} {fmt(f['cpu']):>6} "
              f"{fmt(f['delay_median']) + '/' + fmt(f['delay_max']):>16} "
              f"{fmt(f['skew_median']) + '/' + fmt(f['skew_max']):>15}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
