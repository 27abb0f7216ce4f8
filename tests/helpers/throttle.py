"""Making one namespace test host slow for real, and always undoing it: its link through a
token bucket (``tc qdisc ... tbf``: this kernel has tbf and htb, not netem) inside its
network namespace, or its processes through a cgroup v1 ``cpu`` quota (its sshd is moved in,
so every session it starts afterwards, the check's probe and agent too, runs throttled).
Every command is an argv list."""
import contextlib
import os
import subprocess
import time

import pytest

CPU_ROOT = "/sys/fs/cgroup/cpu"


def _tc(h, *args, check=True):
    return subprocess.run(["ip", "netns", "exec", h.netns, "tc", "qdisc", *args], check=check,
                          capture_output=True, text=True, timeout=30)


def qdiscs(th, host):
    """``tc qdisc show dev eth0`` inside the host (to see that nothing is left)."""
    return _tc(th.host(host), "show", "dev", "eth0").stdout


@contextlib.contextmanager
def link_throttled(th, host, rate="10mbit"):
    """The host's eth0 sends at ``rate`` (burst 32kbit, latency 400ms) while inside."""
    h = th.host(host)
    try:
        _tc(h, "add", "dev", "eth0", "root", "tbf", "rate", rate, "burst", "32kbit",
            "latency", "400ms")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"tc tbf does not work here: {getattr(exc, 'stderr', exc)}")
    try:
        yield h
    finally:
        _tc(h, "del", "dev", "eth0", "root", check=False)


def cgroup_path(th, host):
    return os.path.join(CPU_ROOT, f"mpilaunch-test-{th.host(host).netns}-{os.getpid()}")


@contextlib.contextmanager
def cpu_throttled(th, host, quota_us=10000, period_us=100000):
    """The host's sshd and everything it starts get ``quota_us`` of CPU per ``period_us``
    (10% of one CPU by default) while inside; then back to the root cgroup, and the cgroup
    removed."""
    if os.geteuid() != 0 or not os.path.exists(os.path.join(CPU_ROOT, "cgroup.procs")):
        pytest.skip("needs root and the cgroup v1 cpu controller at " + CPU_ROOT)
    h = th.host(host)
    cg = cgroup_path(th, host)
    os.mkdir(cg)
    try:
        for name, value in (("cpu.cfs_period_us", period_us), ("cpu.cfs_quota_us", quota_us)):
            with open(os.path.join(cg, name), "w") as f:
                f.write(str(value))
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(h.sshd_pid))
        yield h
    finally:
        _release(cg)


def _release(cg):
    """Every process of ``cg`` back to the root cgroup, then ``cg`` removed (a process
    forked meanwhile is moved on the next pass)."""
    for _ in range(100):
        try:
            with open(os.path.join(cg, "cgroup.procs")) as f:
                pids = f.read().split()
        except FileNotFoundError:
            return
        for pid in pids:
            try:
                with open(os.path.join(CPU_ROOT, "cgroup.procs"), "w") as f:
                    f.write(pid)
            except OSError:
                pass          # gone meanwhile
        try:
            os.rmdir(cg)
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"could not remove {cg}")
