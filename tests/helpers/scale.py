"""The scale scenarios, shared by tests/multihost/test_scale.py (16 hosts, CI) and
bench/bench_scale.py (32 to 128): one rank per host, the launcher on host 1 (worker-0, as
ModelArts runs it) or outside the hostfile (the root namespace, as mpi-operator's launcher pod),
and what a user checks: exit status, how long the end took, the host named, what is left on
every host.

Every scenario returns a dict: ``rc``, ``stderr``, ``seconds`` (the figure the scenario is
about), ``left`` (processes left on any host once the launcher is gone: {addr: [cmdline]}),
``wall`` (the launcher's whole run)."""
import os
import signal
import subprocess
import sys
import time

from helpers import REPO
from helpers.launch import clean_env
from helpers.procs import wait_for

# Every rank: mark itself up (a file on the shared file system), then per mode: "ok" exits 0
# at once; "sleep" sleeps; "fail" makes rank FAIL exit 3 after DELAY s (only in attempt 0 when
# restarted) while the others sleep, writing the time of its exit first.
WORKER = """\
import os, sys, time
out, mode, fail, delay, sleep = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
rank = int(os.environ["RANK"])
open(os.path.join(out, "up%d" % rank), "w").close()
if mode == "fail" and rank == fail and os.environ.get("MPILAUNCH_RESTART_COUNT", "0") == "0":
    time.sleep(delay)
    with open(os.path.join(out, "failed"), "w") as fh:
        fh.write(repr(time.time()))
    sys.exit(3)
if mode != "ok":
    time.sleep(sleep)
"""

WHAT = {
    "failing_worker": "a worker exits 3: its exit -> mpilaunch's exit",
    "failing_worker_outside": "the same, the launcher outside the hostfile",
    "lost_host_crash": "a host's processes killed (crash): the kill -> mpilaunch's exit",
    "lost_host_link": "a host's link down: the link down -> mpilaunch's exit",
    "sigterm": "SIGTERM to mpilaunch: the signal -> mpilaunch's exit",
    "restart": "--max_restarts 1, a worker exits 3 in attempt 0: the whole job (wall)",
}


def argv(th, mpirun, n, work, mode, *extra, fail=None, delay=1.0, sleep=60.0, outside=False):
    """mpilaunch over the first n hosts (1 slot each), the worker script in ``work``."""
    os.makedirs(work, exist_ok=True)
    script = os.path.join(work, "worker.py")
    with open(script, "w") as fh:
        fh.write(WORKER)
    hostfile = th.hostfile(slots_per_host=1, n_hosts=n)
    fail = n - 1 if fail is None else fail
    return [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hostfile,
            "--ssh-args", f"-F {th.ssh_config}", "-np", str(n), "--no-scheduler",
            "--log_dir", os.path.join(work, "logs"), *extra,
            script, work, mode, str(fail), str(delay), str(sleep)]


def start(th, cmd, outside=False, env=None):
    """Popen of ``cmd`` inside host 1 (worker-0) or here (outside the hostfile). Inside, the
    pid is the launcher's own (nsenter and ip netns exec exec, they do not fork)."""
    if not outside:
        h = th.hosts[0]
        cmd = ["nsenter", "-t", str(h.sshd_pid), "-u", "--", "ip", "netns", "exec", h.netns] + cmd
    return subprocess.Popen(cmd, env=env or clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(th, proc, timeout=120):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += "\n(timed out: killed by the test)"
    return out, err


def left_on_hosts(th, timeout=5.0):
    """What runs on any host besides sshd, once given ``timeout`` s to go."""
    left = wait_for(lambda: not th.leftovers(), timeout=timeout, interval=0.1)
    if left:
        return {}
    return {h.addr: [cmd for _, cmd in procs] for h, procs in th.leftovers().items()}


def _ranks_up(work, n):
    return sum(1 for i in range(n) if os.path.exists(os.path.join(work, f"up{i}")))


def wait_ranks_up(work, n, timeout=60.0):
    return wait_for(lambda: _ranks_up(work, n) >= n, timeout=timeout)


def failing_worker(th, mpirun, n, work, outside=False):
    """Also ``all_gone_s``: the worker's exit -> no process of the job left on any host."""
    t0 = time.time()
    proc = start(th, argv(th, mpirun, n, work, "fail", delay=1.0), outside)
    out, err = finish(th, proc)
    t_end = time.time()
    gone = wait_for(lambda: not th.leftovers(), timeout=10, interval=0.05)
    t_gone = time.time()
    failed = os.path.join(work, "failed")
    t_fail = float(open(failed).read()) if os.path.exists(failed) else None
    return dict(rc=proc.returncode, stderr=err, stdout=out,
                seconds=None if t_fail is None else t_end - t_fail,
                all_gone_s=t_gone - t_fail if gone and t_fail is not None else None,
                wall=t_end - t0, left=left_on_hosts(th))


def lost_host(th, mpirun, n, work, how="crash", outside=False):
    victim = th.hosts[n - 1]
    t0 = time.time()
    proc = start(th, argv(th, mpirun, n, work, "sleep", sleep=90.0), outside)
    up = wait_ranks_up(work, n)
    t_fault = time.time()
    if up:
        (th.crash if how == "crash" else th.link_down)(victim)
    out, err = finish(th, proc, timeout=120)
    t_end = time.time()
    if how == "link":
        th.link_up(victim)
    th.restore(victim)
    return dict(rc=proc.returncode, stderr=err, stdout=out, seconds=t_end - t_fault if up else None,
                wall=t_end - t0, victim=victim, left=left_on_hosts(th))


def sigterm(th, mpirun, n, work, outside=False):
    t0 = time.time()
    proc = start(th, argv(th, mpirun, n, work, "sleep", sleep=90.0), outside)
    up = wait_ranks_up(work, n)
    t_sig = time.time()
    proc.send_signal(signal.SIGTERM)
    out, err = finish(th, proc)
    t_end = time.time()
    gone = wait_for(lambda: not th.leftovers(), timeout=10, interval=0.05)
    t_gone = time.time()
    return dict(rc=proc.returncode, stderr=err, stdout=out, seconds=t_end - t_sig if up else None,
                all_gone_s=t_gone - t_sig if gone else None, wall=t_end - t0, left=left_on_hosts(th))


def restart(th, mpirun, n, work, outside=False):
    t0 = time.time()
    proc = start(th, argv(th, mpirun, n, work, "fail", "--max_restarts", "1", delay=0.5, sleep=0.5),
                 outside)
    out, err = finish(th, proc)
    t_end = time.time()
    return dict(rc=proc.returncode, stderr=err, stdout=out, seconds=t_end - t0, wall=t_end - t0,
                left=left_on_hosts(th))


SCENARIOS = {
    "failing_worker": failing_worker,
    "failing_worker_outside": lambda th, m, n, w: failing_worker(th, m, n, w, outside=True),
    "lost_host_crash": lambda th, m, n, w: lost_host(th, m, n, w, "crash"),
    "lost_host_link": lambda th, m, n, w: lost_host(th, m, n, w, "link"),
    "sigterm": sigterm,
    "restart": restart,
}
