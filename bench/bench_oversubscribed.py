"""More local ranks than CPUs: an MPI job's step time under mpilaunch (which passes
``mpi_yield_when_idle 1`` then: config/mpiargs.py ``yield_tokens``), under mpilaunch with the
waiting ranks spinning (``--mca-args "-mca mpi_yield_when_idle 0"``, what it did before) and under
bare ``mpirun --oversubscribe``, interleaved, medians.

The job: NP mpi4py ranks (default 4x this machine's CPUs), rank 0 working 2 ms a step, an
``allreduce`` a step, 200 steps; rank 0 prints the mean step time.
Standalone: ``python3 bench/bench_oversubscribed.py [--runs 3] [--np N]``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Optional

JOB = r'''
import time
from mpi4py import MPI
c = MPI.COMM_WORLD
t = time.perf_counter()
for i in range(200):
    if c.rank == 0:
        time.sleep(0.002)
    c.allreduce(i)
if c.rank == 0:
    print(f"STEP_MS {(time.perf_counter() - t) / 200 * 1000:.3f}", flush=True)
'''
MPIRUN = os.path.join(os.path.dirname(sys.executable), "mpirun")


def step_ms(argv: List[str]) -> Optional[float]:
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600,
                         env={**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    m = re.search(r"STEP_MS (\S+)", out.stdout)
    return float(m.group(1)) if m else None


def measure(runs: int, np: int) -> dict:
    work = tempfile.mkdtemp(prefix="bench-oversub-")
    job = os.path.join(work, "job.py")
    with open(job, "w") as f:
        f.write(JOB)
    ml = [sys.executable, "-m", "mpilaunch", "-np", str(np), "--log_dir", os.path.join(work, "logs")]
    variants = {
        "mpilaunch": ml + [job],
        "mpilaunch, spinning": ml + ["--mca-args", "-mca mpi_yield_when_idle 0", job],
        "mpirun --oversubscribe": [MPIRUN, "--oversubscribe", "-np", str(np), sys.executable, job],
    }
    got: Dict[str, List[Optional[float]]] = {v: [] for v in variants}
    for _ in range(runs):
        for v, argv in variants.items():
            got[v].append(step_ms(argv))
    return {"np": np, "cpus": len(os.sched_getaffinity(0)), "load_1min": round(os.getloadavg()[0], 1),
            "step_ms": got, "median_ms": {v: statistics.median([x for x in r if x is not None])
                                          if any(x is not None for x in r) else None for v, r in got.items()}}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--np", type=int, default=4 * len(os.sched_getaffinity(0)))
    a = ap.parse_args()
    print(json.dumps(measure(a.runs, a.np), indent=1))
