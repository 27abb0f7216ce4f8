"""The stop of a job whose workers have no SIGTERM handler, by a SIGTERM to mpilaunch: the
graceful stop (the default: every worker SIGTERM over the control channel, a 20 s grace) against
the starter's immediate stop (``--term-grace 0``, the behaviour before the default), interleaved
round by round, medians. Measured: the SIGTERM -> mpilaunch has exited and no process of the
job (snapshotted before the signal) is left.

    python3 bench/bench_stop.py [ROUNDS] [MPIRUN...]

Prints a line per MPI: the medians of both and their ratio, and the exit statuses seen.
"""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_HANDLER = (
    "import os, sys, time\n"
    "open(os.path.join(sys.argv[1], 'up_' + os.environ['RANK']), 'w').close()\n"
    "while True:\n"
    "    time.sleep(0.05)\n")
VARIANTS: Dict[str, Tuple[str, ...]] = {"default grace": (), "--term-grace 0": ("--term-grace", "0")}


def _peers(pid: int) -> int:
    """The adapters connected to the launcher's control port (the graceful stop goes there)."""
    try:
        return sum(1 for c in psutil.Process(pid).net_connections("all")
                   if c.status == psutil.CONN_ESTABLISHED)
    except psutil.Error:
        return 0


def one(mpirun: str, extra: Sequence[str], work: str) -> Tuple[float, int]:
    """One job: -> (seconds from the SIGTERM until every process is gone, mpilaunch's status)."""
    out = tempfile.mkdtemp(dir=work)
    script = os.path.join(out, "noh.py")
    with open(script, "w") as f:
        f.write(NO_HANDLER)
    proc = subprocess.Popen([sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "2",
                             "--no-scheduler", "--master_port", "0", "--log_dir",
                             os.path.join(out, "logs"), *extra, script, out],
                            cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    end = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(out, f"up_{r}")) for r in range(2)) \
            or _peers(proc.pid) < 2:
        if time.monotonic() > end:
            proc.kill()
            raise RuntimeError("the job did not start")
        time.sleep(0.02)
    kids = psutil.Process(proc.pid).children(recursive=True)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(60)
    _, alive = psutil.wait_procs(kids, timeout=30)
    return time.monotonic() - t0, rc


def main(argv: List[str]) -> None:
    rounds = int(argv[0]) if argv else 7
    mpiruns = argv[1:] or [os.path.join(os.path.dirname(sys.executable), "mpirun"), "/usr/bin/mpirun"]
    with tempfile.TemporaryDirectory() as work:
        for mpirun in mpiruns:
            if not os.access(mpirun, os.X_OK):
                continue
            took: Dict[str, List[float]] = {v: [] for v in VARIANTS}
            codes: Dict[str, set] = {v: set() for v in VARIANTS}
            one(mpirun, (), work)   # warm-up, discarded
            for _ in range(rounds):
                for name, extra in VARIANTS.items():   # interleaved: the same load for both
                    t, rc = one(mpirun, extra, work)
                    took[name].append(t)
                    codes[name].add(rc)
            med = {v: statistics.median(t) for v, t in took.items()}
            ratio: Optional[float] = med["default grace"] / med["--term-grace 0"]
            print(f"{mpirun}: {rounds} rounds; " + "; ".join(
                f"{v}: median {med[v]:.3f} s (min {min(took[v]):.3f}, max {max(took[v]):.3f}), "
                f"status {sorted(codes[v])}" for v in VARIANTS) + f"; ratio {ratio:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
