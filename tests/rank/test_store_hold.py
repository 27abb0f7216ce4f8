"""rank/inplace/hold.py: which jobs get rank 0's store holder (exact), and the real holder
process (spare.py --hold, real torch): it answers ``held PORT`` only once it listens there; one
that does not answer within HOLD_WAIT is killed and never asked again (the restart then goes
as without it); the job's end (close) leaves no process behind; its supervisors keep it."""
import os
import signal
import socket
import subprocess
import sys
import time
from collections import namedtuple

import pytest

from helpers.ports import free_port
from helpers.procs import pid_alive, wait_for
from mpilaunch.rank.inplace import hold
from mpilaunch.rank.plan import ChildSpec
from mpilaunch.rank.supervisor import Supervisor

Opts = namedtuple("Opts", "no_python module")
TORCH_DDP = "import torch\nimport torch.distributed as dist\ndist.init_process_group('gloo')\n"


def _spec(script, **env):
    full = dict(os.environ, RANK="0", WORLD_SIZE="2", **env)
    return ChildSpec("worker", [sys.executable, str(script)], full, "/dev/null")


@pytest.mark.parametrize("text, env, rank, expected", [
    (TORCH_DDP, {}, "0", True),
    (TORCH_DDP, {}, "1", False),                                         # rank 0's host only
    (TORCH_DDP, {"MPILAUNCH_STORE_HOLD": "0"}, "0", False),              # turned off
    (TORCH_DDP, {"TORCHELASTIC_USE_AGENT_STORE": "False"}, "0", False),  # the user's choice
    ("import numpy\nprint(1)\n", {}, "0", False),                        # not a torch job
    (TORCH_DDP + "s = dist.TCPStore('h', 1, 2, True)\n", {}, "0", False),   # its own server
    (TORCH_DDP.replace("'gloo'", "'gloo', init_method='tcp://h:1'"), {}, "0", False),
])
def test_which_jobs_get_a_store_holder(tmp_path, text, env, rank, expected):
    script = tmp_path / "train.py"
    script.write_text(text)
    spec = _spec(script, **env)._replace(env=dict(_spec(script, **env).env, RANK=rank))
    assert hold.holds(spec, spec.argv, Opts(False, False)) is expected
    assert hold.holds(spec, spec.argv, Opts(False, True)) is False     # -m: no spare, no holder


def _accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(subprocess.run([sys.executable, "-c", "import torch.distributed"],
                                   capture_output=True).returncode != 0,
                    reason="torch not installed")
def test_the_holder_listens_before_it_says_held_and_is_gone_when_slow_or_at_the_end(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TORCH_DDP)
    spec = _spec(script)
    sup = Supervisor([spec], 0, "h")
    sup.children["worker"].status = 0      # the worker "started": the holders may start
    slow, ending = hold.Holder(sup, spec, sup.children["worker"]), None
    try:
        ending = hold.Holder(sup, spec, sup.children["worker"])
        for h in (slow, ending):
            assert wait_for(h.ready, timeout=120), h.why
            assert h.pid in sup.keep       # never taken for a leftover of the attempt
            with open(f"/proc/{h.pid}/comm") as fh:
                assert fh.read().strip() == "mpilaunch-store"
        sup2 = Supervisor([spec], 0, "h")
        slow.attach(sup2)
        assert slow.pid in sup2.keep       # the next attempt's supervisor keeps it too
        port = int(free_port())
        assert slow.hold(1, port) and _accepts(port)    # listening as soon as it says so
        # stopped: no answer in time -> not held, killed, never asked again
        os.kill(slow.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        assert not slow.hold(2, int(free_port()))
        assert time.monotonic() - t0 < hold.HOLD_WAIT + 1.0
        assert slow.why == f"no answer within {hold.HOLD_WAIT} s"
        assert slow.exited.wait(10) and not pid_alive(slow.pid)
        assert not _accepts(port)          # its stores went with it
        assert not slow.hold(3, int(free_port())) and slow.why.startswith("no answer")
        # the job's end: it leaves at once, nothing behind
        pid = ending.pid
        ending.close()
        assert ending.exited.is_set() and not pid_alive(pid)
    finally:
        for h in (slow, ending):
            if h is not None:
                h.close()
