"""7. Launch overhead on every MPI, side by side: MPICH and Intel MPI (Hydra's mpiexec, venvs of
scripts/setup_hydra.sh) next to Open MPI 5 (the wheel), in the same run.

Same method as section 1 (bench_launch.py): per MPI, ``bare mpiexec`` = the exact argv mpilaunch
plans (launchconfig.build -> plan.make_plan -> plan.argv) with the rank command replaced by
``python SCRIPT``, against ``mpilaunch -np N SCRIPT`` (default options, that MPI's own
interpreter); the variants of ALL MPIs are interleaved round by round, and the overhead is the
median of the paired differences. Standalone: ``python3 bench/bench_hydra.py [--runs 10]``.

Teardown (``--teardown``): ``mpilaunch -np 2`` on each MPI with sleeping ranks; when both are
ready, rank 1's worker is SIGKILLed; timed until the launcher has exited and none of the job's
processes (its descendants, snapshotted just before the kill) is left, as in section 3
(bench_teardown.py); the MPIs interleaved round by round, medians.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCRIPT = os.path.join(REPO, "examples", "exit_at_once.py")
N = 4
TARGET = 0.15
MPIS = [("Open MPI 5 (wheel)", sys.executable, os.path.join(os.path.dirname(sys.executable), "mpirun")),
        ("MPICH", "/opt/mpilaunch/mpich-venv/bin/python", "/opt/mpilaunch/mpich-venv/bin/mpirun"),
        ("Intel MPI", "/opt/mpilaunch/impi-venv/bin/python", "/opt/mpilaunch/impi-venv/bin/mpirun")]
PLAN = """\
import json, os, sys
from mpilaunch import backends, rundir
from mpilaunch.config import launchconfig, mpi, options
py, mpirun, n, script, run_dir = sys.argv[1:6]
env = dict(os.environ)
args = options.parser().parse_args(["--mpirun", mpirun, "-np", n, "--master_port", "48199", "--log_dir",
                                    run_dir, "--python", py, script])
cfg = launchconfig.build(args, env)
b = backends.for_mpi(mpi.detect(cfg.mpirun, env))
p = b.plan(cfg, env, run_dir, os.geteuid())
for path, text in b.files(p):
    rundir.write_atomic(path, text)
argv = b.argv(p)
cut = len(argv) - len(p.rank_command)
print(json.dumps({"argv": argv[:cut] + [py, script], "env": p.extra_env, "mpi": p.mpi.name}))
"""


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMPI_", "SSHD_PORT", "MA_", "VC_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def _timed(argv, env):
    t = time.perf_counter()
    rc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, timeout=120).returncode
    return time.perf_counter() - t, rc


def measure(runs: int, log=print) -> dict:
    env = _env()
    work = tempfile.mkdtemp(prefix="bench-hydra-")
    variants = []
    for label, py, mpirun in MPIS:
        if not (os.access(py, os.X_OK) and os.access(mpirun, os.X_OK)):
            log(f"[hydra] {label}: not installed ({py}), skipped")
            continue
        run_dir = os.path.join(work, label.split()[0])
        os.makedirs(run_dir, exist_ok=True)
        out = subprocess.run([py, "-c", PLAN, py, mpirun, str(N), SCRIPT, run_dir], env=env, cwd=REPO,
                             capture_output=True, text=True, check=True)
        planned = json.loads(out.stdout)
        bare = (planned["argv"], {**env, **planned["env"]})
        wrapped = ([py, "-m", "mpilaunch", "--mpirun", mpirun, "-np", str(N), "--master_port", "48199",
                    "--log_dir", run_dir, SCRIPT], env)
        variants.append((label, planned["mpi"], bare, wrapped))
    samples = {v[0]: {"bare": [], "mpilaunch": [], "bad": 0} for v in variants}
    for round_no in range(runs + 1):   # round 0: warm-up, discarded
        for label, _, bare, wrapped in variants:
            for kind, (argv, e) in (("bare", bare), ("mpilaunch", wrapped)):
                wall, rc = _timed(argv, e)
                if round_no and rc == 0:
                    samples[label][kind].append(wall)
                elif round_no:
                    samples[label]["bad"] += 1
    rows = []
    for label, name, _, _ in variants:
        s = samples[label]
        deltas = [m - b for b, m in zip(s["bare"], s["mpilaunch"])]
        rows.append({"mpi": name, "bare_median_s": statistics.median(s["bare"]) if s["bare"] else None,
                     "mpilaunch_median_s": statistics.median(s["mpilaunch"]) if s["mpilaunch"] else None,
                     "added_median_s": statistics.median(deltas) if deltas else None,
                     "runs": len(deltas), "failed_runs": s["bad"]})
    __import__("shutil").rmtree(work, ignore_errors=True)
    return {"n": N, "runs": runs, "rows": rows}


# Teardown: every rank writes ready<RANK>.<its pid> and sleeps; rank 1's worker (the script
# process itself, under its adapter) is SIGKILLed once all are ready.
WORKER = """\
import os, sys, time
open(os.path.join(sys.argv[1], "ready%s.%d" % (os.environ["RANK"], os.getpid())), "w").close()
time.sleep(300)
"""
TEARDOWN_NP = 2


def teardown_once(py, mpirun, work, port):
    """mpilaunch -np 2 (that MPI's interpreter); when both ranks are ready, snapshot the
    launcher's descendants (psutil), SIGKILL rank 1's worker and time until the launcher has
    exited and none of the snapshotted processes is left (zombies count as gone; 20 ms polling).
    -> (seconds or None, launcher exit status, leftover names)."""
    import glob
    import signal

    import psutil

    d = tempfile.mkdtemp(dir=work)
    script = os.path.join(d, "worker.py")
    with open(script, "w") as fh:
        fh.write(WORKER)
    argv = [py, "-m", "mpilaunch", "--mpirun", mpirun, "-np", str(TEARDOWN_NP), "--master_port", str(port),
            "--no-scheduler", "--log_dir", os.path.join(d, "logs"), script, d]
    proc = subprocess.Popen(argv, env=_env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(glob.glob(os.path.join(d, "ready*"))) < TEARDOWN_NP:
            if proc.poll() is not None or time.monotonic() > deadline:
                return None, proc.poll(), ["did not start"]
            time.sleep(0.02)
        snap = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        victim = int(glob.glob(os.path.join(d, "ready1.*"))[0].rsplit(".", 1)[1])
        t0 = time.perf_counter()
        os.kill(victim, signal.SIGKILL)

        def alive():
            out = []
            for p in snap:
                try:
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                        out.append(p)
                except psutil.Error:
                    pass
            return out
        end = time.monotonic() + 60
        while (proc.poll() is None or alive()) and time.monotonic() < end:
            time.sleep(0.02)
        took = time.perf_counter() - t0
        left = [p.name() for p in alive()]
        return (None if left or proc.poll() is None else took), proc.poll(), left
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def measure_teardown(runs: int, log=print) -> dict:
    """The MPIs interleaved round by round (round 0: warm-up, discarded); medians."""
    work = tempfile.mkdtemp(prefix="bench-hydra-td-")
    mpis = [m for m in MPIS if os.access(m[1], os.X_OK) and os.access(m[2], os.X_OK)]
    samples = {m[0]: {"s": [], "rc": set(), "bad": 0} for m in mpis}
    port = 48210
    for round_no in range(runs + 1):
        for label, py, mpirun in mpis:
            port += 1
            took, rc, left = teardown_once(py, mpirun, work, port)
            if not round_no:
                continue
            samples[label]["rc"].add(rc)
            if took is None:
                samples[label]["bad"] += 1
                log(f"[hydra-teardown] {label}: failed run (rc {rc}, left {left})")
            else:
                samples[label]["s"].append(took)
    __import__("shutil").rmtree(work, ignore_errors=True)
    rows = [{"mpi": label, "median_s": statistics.median(v["s"]) if v["s"] else None,
             "min_s": min(v["s"]) if v["s"] else None, "max_s": max(v["s"]) if v["s"] else None,
             "runs": len(v["s"]), "failed_runs": v["bad"], "exit_status": sorted(v["rc"], key=str)}
            for label, v in samples.items()]
    return {"np": TEARDOWN_NP, "runs": runs, "rows": rows}


def run(opts, log) -> dict:
    """Section for bench/run.py."""
    res = measure(opts.runs or 5, log)
    td = measure_teardown(opts.runs or 5, log)
    f = lambda x: "—" if x is None else f"{x:.3f}"   # noqa: E731
    return {
        "key": "hydra", "title": "7. Launch overhead on Open MPI, MPICH and Intel MPI (N=4)",
        "method": [p.replace("\n", " ") for p in __doc__.split("\n\n")[1:3]],
        "tables": [{"title": f"exit_at_once.py, N={N}, {res['runs']} interleaved rounds",
                    "columns": ["MPI", "bare mpiexec (s)", "mpilaunch (s)", "added (median of paired diffs, s)", "failed runs"],
                    "rows": [[r["mpi"], f(r["bare_median_s"]), f(r["mpilaunch_median_s"]), f(r["added_median_s"]),
                              r["failed_runs"]] for r in res["rows"]]},
                   {"title": f"Teardown after rank 1's worker is SIGKILLed (mpilaunch -np {td['np']}, sleeping "
                             f"ranks; kill -> launcher exited and every process of the job gone), "
                             f"{td['runs']} interleaved rounds",
                    "columns": ["MPI", "median (s)", "min (s)", "max (s)", "exit status", "failed runs"],
                    "rows": [[r["mpi"], f(r["median_s"]), f(r["min_s"]), f(r["max_s"]),
                              ", ".join(map(str, r["exit_status"])), r["failed_runs"]] for r in td["rows"]]}],
        "verdicts": [{"figure": f"added launch time, {r['mpi']}", "value": f(r["added_median_s"]),
                      "target": f"≤ {TARGET}", "met": None if r["added_median_s"] is None else r["added_median_s"] <= TARGET}
                     for r in res["rows"]] +
                    [{"figure": f"teardown after a SIGKILLed worker, {r['mpi']} (median)", "value": f(r["median_s"]),
                      "target": "≤ 3 s (section 3)", "met": None if r["median_s"] is None else r["median_s"] <= 3.0}
                     for r in td["rows"]],
        "chart": None, "profile": [], "raw": {**res, "teardown": td},
    }


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--teardown", action="store_true", help="teardown after a SIGKILLed worker instead")
    a = ap.parse_args()
    fn = measure_teardown if a.teardown else measure
    print(json.dumps(fn(a.runs, lambda m: print(m, file=sys.stderr)), indent=1))
