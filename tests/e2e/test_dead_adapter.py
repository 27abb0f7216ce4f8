"""A rank's adapter killed by SIGKILL ends the job on every backend, at once, with 137 and the
rank named (docs/HANGS.md): its control connection closes without its last word. 4 ranks and a
scheduler whose workers would sleep 60 s; before, Intel MPI's mpiexec waited for them (55 s)
and MPICH's report gave "a rank (rank): exit code 9"."""
import os
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import ALL, mpilaunch_argv
from helpers.procs import adapter_of_rank, alive, descendants, wait_for
from helpers.sigworker import channel_peers

SLEEPER = r'''
import os, sys, time
role = "sched" if os.environ.get("MS_ROLE") == "MS_SCHED" else os.environ["RANK"]
open(os.path.join(sys.argv[1], "up_" + role), "w").close()
time.sleep(60)
'''
BOUND = 10.0    # s from the kill to the launcher's end; the workers' own end is 60 s away


def kill_adapter_and_wait(argv, tmp_path, np, env=None):
    """Start ``argv``, wait for every worker and every adapter on the control channel, SIGKILL
    rank 1's adapter: (seconds to the launcher's end, its status, its stderr, what is left)."""
    proc = subprocess.Popen(argv, env=env or clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        up = lambda: all((tmp_path / f"up_{r}").exists() for r in range(np))   # noqa: E731
        assert wait_for(up, 90), proc.stderr.read() if proc.poll() is not None else "not up"
        assert wait_for(lambda: channel_peers(proc.pid) == np, 20), channel_peers(proc.pid)
        kids = descendants(proc.pid)
        victim = adapter_of_rank(kids, 1)
        assert victim is not None, kids
        t0 = time.monotonic()
        victim.kill()
        _, err = proc.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return took, proc.returncode, err, wait_left(kids)


def wait_left(kids, timeout=10):
    wait_for(lambda: not alive(kids), timeout)
    return alive(kids)


@pytest.mark.parametrize("mpi", ALL)
def test_a_killed_adapter_ends_the_job_with_its_rank_named(mpi, tmp_path):
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    argv = mpilaunch_argv(mpi, "-np", "4", "--oversubscribe", "--scheduler", "--master_port", "0",
                          "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path))
    took, rc, err, left = kill_adapter_and_wait(argv, tmp_path, 4)
    host = os.uname().nodename
    assert rc == 137, err
    assert took < BOUND, (took, err)
    assert f"root cause: rank 1 (adapter) on host {host}: killed by signal 9 (SIGKILL)" in err, err
    assert "closed without its last word" in err
    assert left == [], left


LINK = r'''
import sys, time
from mpilaunch.rank import control
link = control.Link((sys.argv[1], sys.argv[2]), 5, lambda: None, print)
link.start()
assert link.connected.wait(10)
print("connected", flush=True)
if sys.argv[3] == "bye":
    control.bye()
    sys.exit(0)
time.sleep(60)
'''


def test_the_channel_tells_a_dead_adapter_from_one_that_said_bye(tmp_path):
    """The launcher's end of the control channel (supervise/control.py) with a real adapter link
    in another process: one that says bye and exits is not dead; one SIGKILLed is, with its
    rank, pid and host; a hello without the key's MAC is refused."""
    import socket
    from mpilaunch.supervise.control import Control
    from mpilaunch.rank.control import ENDPOINT_VAR

    dead = []
    ctl = Control((), 1, on_dead=lambda *a: dead.append(a))
    try:
        endpoint = ctl.env[ENDPOINT_VAR]
        for how in ("bye", "kill"):
            p = subprocess.Popen([sys.executable, "-c", LINK, endpoint, ctl.token, how],
                                 cwd=REPO, stdout=subprocess.PIPE, text=True)
            assert p.stdout.readline() == "connected\n"
            assert ctl.ranks() == [5]
            if how == "kill":
                p.kill()
            p.wait(10)
            assert wait_for(lambda: ctl.ranks() == [], 10)
            if how == "bye":
                assert dead == []
        assert wait_for(lambda: dead, 5) and dead == [(5, p.pid, os.uname().nodename)]
        addr, port = endpoint.rsplit(":", 1)
        with socket.create_connection((addr.split(",")[0], int(port)), timeout=5) as s:
            s.sendall(b"hello 7 abc 1 h 00\n")
            assert s.recv(64) == b""        # closed: no ok for a hello without the key's MAC
        assert ctl.ranks() == []
    finally:
        ctl.close()
