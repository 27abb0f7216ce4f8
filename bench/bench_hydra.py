"""7. Launch overhead on every MPI, side by side: MPICH and Intel MPI (Hydra's mpiexec, venvs of
scripts/setup_hydra.sh) next to Open MPI 5 (the wheel), in the same run.

Same method as section 1 (bench_launch.py): per MPI, ``bare mpiexec`` = the exact argv mpilaunch
plans (config.build -> plan.make_plan -> plan.argv) with the rank command replaced by
``python SCRIPT``, against ``mpilaunch -np N SCRIPT`` (default options, that MPI's own
interpreter); the variants of ALL MPIs are interleaved round by round, and the overhead is the
median of the paired differences. Standalone: ``python3 bench/bench_hydra.py [--runs 10]``.
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
from mpilaunch import config, launcher, mpi, options, plan
py, mpirun, n, script, run_dir = sys.argv[1:6]
env = dict(os.environ)
args = options.parser().parse_args(["--mpirun", mpirun, "-np", n, "--master_port", "48199", "--log_dir",
                                    run_dir, "--python", py, script])
cfg = config.build(args, env)
p = plan.make_plan(cfg, env, mpi.detect(cfg.mpirun, env), run_dir, os.geteuid())
launcher.write_files(p)
argv = plan.argv(p)
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


def run(opts, log) -> dict:
    """Section for bench/run.py."""
    res = measure(opts.runs or 5, log)
    f = lambda x: "—" if x is None else f"{x:.3f}"   # noqa: E731
    return {
        "key": "hydra", "title": "7. Launch overhead on Open MPI, MPICH and Intel MPI (N=4)",
        "method": [__doc__.split("\n\n")[1].replace("\n", " ")],
        "tables": [{"title": f"exit_at_once.py, N={N}, {res['runs']} interleaved rounds",
                    "columns": ["MPI", "bare mpiexec (s)", "mpilaunch (s)", "added (median of paired diffs, s)", "failed runs"],
                    "rows": [[r["mpi"], f(r["bare_median_s"]), f(r["mpilaunch_median_s"]), f(r["added_median_s"]),
                              r["failed_runs"]] for r in res["rows"]]}],
        "verdicts": [{"figure": f"added launch time, {r['mpi']}", "value": f(r["added_median_s"]),
                      "target": f"≤ {TARGET}", "met": None if r["added_median_s"] is None else r["added_median_s"] <= TARGET}
                     for r in res["rows"]],
        "chart": None, "profile": [], "raw": res,
    }


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    print(json.dumps(measure(ap.parse_args().runs, lambda m: print(m, file=sys.stderr)), indent=1))
