"""A lost host: from its pulled link to the first training step on the hosts left, mpilaunch
against torchrun, on 3 namespace hosts (tests/helpers/hosts; root needed), 1 rank each.

The job is tests/helpers/restart.py's TRAIN (gloo, a checkpoint every 3 steps, resumed from it)
through a wrapper that makes the rank on host 3 hold at step 5; once it holds (the others wait
for it in the step's all_reduce), host 3's link goes down (its veth: packets lost, TCP silent, as
a pulled cable). The figure: the link down -> the latest first step (the wall time each rank
writes at its first step) among the 2 ranks of the next attempt. ``mpilaunch``: ``--max_restarts
1 --min-hosts 2`` (the default restart mode; a lost host makes it a relaunch on the hosts left),
started inside host 1. ``torchrun``: ``python -m torch.distributed.run --nnodes 2:3
--nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint HOST1:PORT --max-restarts 1`` started
inside every host (an elastic job allowed to go on with 2 nodes). Trials alternate; a trial with
no step within ``--wait`` s is reported as such (and its processes killed).
Standalone: ``python3 bench/bench_lost_host.py [--runs 3] [--wait 180]``.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
PREFIX = "mlh"
OMPI5 = os.path.join(os.path.dirname(sys.executable), "mpirun")

# argv: HOLD_HOST TRAIN ARGS: the rank on HOLD_HOST holds at step 5 (its pid in
# holding_<rank>), in the first attempt only
WRAPPER = r'''
import os, runpy, socket, sys
holder = sys.argv[1] == socket.gethostname()
rank = os.environ["RANK"]
sys.argv = sys.argv[2:] + ["--hold-step", "5", "--kill-rank", rank if holder else "-1"]
runpy.run_path(sys.argv[0], run_name="__main__")
'''
# torchrun's agent resolves its own host name (rendezvous/utils.py, _matches_machine_hostname):
# the namespace hosts have no name service, so each agent runs in a mount namespace of its own
# whose /etc/hosts names the 3 hosts (argv: HOSTS_FILE COMMAND...)
WITH_HOSTS = r'''
import os, subprocess, sys
subprocess.run(["mount", "--bind", sys.argv[1], "/etc/hosts"], check=True)
os.execv(sys.argv[2], sys.argv[2:])
'''


def _env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMPI_", "SSHD_PORT", "MA_", "VC_"))}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    return env


def _first_steps(out: str, after: float) -> List[float]:
    """The first-step times (rank-written) later than ``after``, one per rank file."""
    found = []
    for path in glob.glob(os.path.join(out, "first_step_*")):
        try:
            t = float(open(path).read())
        except (OSError, ValueError):
            continue
        if t > after:
            found.append(t)
    return found


def _kill_tree(procs: List[subprocess.Popen]) -> None:
    for p in procs:
        try:
            family = psutil.Process(p.pid).children(recursive=True)
        except psutil.Error:
            family = []
        for q in [psutil.Process(p.pid)] + family if p.poll() is None else family:
            try:
                q.kill()
            except psutil.Error:
                pass
        p.wait()


def trial(variant: str, desc: dict, work: str, wait: float, log: Callable[[str], None]) -> Optional[float]:
    from helpers.hosts import faults
    from helpers.restart import TRAIN

    out = tempfile.mkdtemp(prefix=f"{variant}-", dir=work)
    train, wrapper = os.path.join(out, "train.py"), os.path.join(out, "hold.py")
    with open(train, "w") as f:
        f.write(TRAIN)
    with open(wrapper, "w") as f:
        f.write(WRAPPER)
    hosts = desc["hosts"][:3]
    env = _env()
    inside = [["nsenter", "-t", str(h["sshd_pid"]), "-u", "--", "ip", "netns", "exec", h["netns"]]
              for h in hosts]
    job = [wrapper, hosts[2]["hostname"], train, "--out", out, "--steps", "12"]
    procs = []
    if variant == "mpilaunch":
        hf = os.path.join(out, "hosts")
        with open(hf, "w") as f:
            f.writelines(f"{h['addr']} slots=1\n" for h in hosts)
        procs.append(subprocess.Popen(
            inside[0] + [sys.executable, "-m", "mpilaunch", "--mpirun", OMPI5, "--hostfile", hf,
                         "--ssh-args", f"-F {desc['ssh_config']}", "--no-scheduler", "--master_port", "0",
                         "--max_restarts", "1", "--min-hosts", "2", "--log_dir", os.path.join(out, "logs"),
                         *job],
            env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(out, "launcher.err"), "w")))
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        etc_hosts, with_hosts = os.path.join(out, "etc_hosts"), os.path.join(out, "with_hosts.py")
        with open(etc_hosts, "w") as f:
            f.write("127.0.0.1 localhost\n" + "".join(f"{h['addr']} {h['hostname']}\n" for h in hosts))
        with open(with_hosts, "w") as f:
            f.write(WITH_HOSTS)
        for i, pre in enumerate(inside):
            procs.append(subprocess.Popen(
                pre + ["unshare", "--mount", "--", sys.executable, with_hosts, etc_hosts,
                       sys.executable, "-m", "torch.distributed.run", "--nnodes", "2:3", "--nproc_per_node", "1",
                       "--rdzv_backend", "c10d", "--rdzv_endpoint", f"{hosts[0]['addr']}:{port}",
                       "--rdzv_id", "lost", "--max-restarts", "1", *job],
                env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(out, f"torchrun{i}.err"), "w")))
    figure = None
    try:
        deadline = time.monotonic() + 240
        while not glob.glob(os.path.join(out, "holding_*")):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                said = "".join(open(e).read()[-600:] for e in sorted(glob.glob(os.path.join(out, "*.err"))))
                log(f"[lost-host] {variant}: the job did not reach its holding step:\n{said}")
                return None
            time.sleep(0.2)
        time.sleep(1.0)   # the others are in the step's all_reduce
        t_down = time.time()
        faults.set_link(PREFIX, hosts[2]["index"], False)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            steps = _first_steps(out, t_down)
            if len(steps) >= 2:
                figure = max(steps) - t_down
                break
            time.sleep(0.1)
        said = "" if figure is not None else "".join(
            f"\n  {os.path.basename(e)}: " + open(e).read()[-300:].replace("\n", " | ")
            for e in sorted(glob.glob(os.path.join(out, "*.err"))))
        log(f"[lost-host] {variant}: " + (f"{figure:.2f} s" if figure is not None
                                          else f"no step within {wait:g} s{said}"))
        return figure
    finally:
        faults.set_link(PREFIX, hosts[2]["index"], True)
        if variant == "mpilaunch" and figure is not None:
            try:
                procs[0].wait(timeout=120)
            except subprocess.TimeoutExpired:
                pass
        _kill_tree(procs)


def measure(runs: int, wait: float, log: Callable[[str], None] = print) -> dict:
    from helpers.hosts import hostset

    why = hostset.missing_prereqs()
    if why:
        return {"skipped": why}
    desc = hostset.up(3, PREFIX, None, os.getpid(), verify=True, quiet=True)
    work = tempfile.mkdtemp(prefix="bench-lost-host-")
    results: Dict[str, List[Optional[float]]] = {"mpilaunch": [], "torchrun": []}
    try:
        for _ in range(runs):
            for variant in ("mpilaunch", "torchrun"):
                results[variant].append(trial(variant, desc, work, wait, log))
    finally:
        hostset.down(PREFIX, force=True)
        __import__("shutil").rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    return {"runs": runs, "wait_s": wait, "load_1min": round(load, 1), "trials_s": results,
            "median_s": {v: statistics.median([x for x in r if x is not None]) if any(x is not None for x in r)
                         else None for v, r in results.items()}}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--wait", type=float, default=180.0)
    a = ap.parse_args()
    print(json.dumps(measure(a.runs, a.wait, lambda m: print(m, file=sys.stderr)), indent=1))
