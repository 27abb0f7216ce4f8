"""Which spare starts the next attempt's rendezvous store before its script runs
(mpilaunch/rank/inplace/prestart.py listens): rank 0's, for a torch script whose
init_process_group makes the env:// store, never where the script makes a store server of its
own or names an init_method (the port would be taken twice). Also which child of a rank gets a
spare (the worker; rank 0's MindSpore scheduler) and how an attempt's supervisor takes them."""
from types import SimpleNamespace

import pytest

from mpilaunch.rank.inplace.prestart import listens

PLAIN = "import torch.distributed as dist\ndist.init_process_group('gloo')\n"
CLIENT = ("import os, torch.distributed as dist\n"
          "store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),\n"
          "                      is_master=False)\n"
          "dist.init_process_group('gloo', store=store, rank=0, world_size=2)\n")
SERVER = ("import torch.distributed as dist\nstore = dist.TCPStore('a', 29500, 2, True)\n"
          "dist.init_process_group('gloo')\n")
METHOD = "import torch.distributed as dist\ndist.init_process_group('gloo', init_method='tcp://a:1')\n"


@pytest.mark.parametrize("text, rank, modules, want", [
    (PLAIN, "0", "torch", True),
    (PLAIN, "1", "torch", False),            # only rank 0's worker hosts the store
    (PLAIN, "0", "mindspore", False),        # not a torch spare
    (CLIENT, "0", "torch", True),            # a client of the store: fine
    (SERVER, "0", "torch", False),
    (METHOD, "0", "torch", False),
    ("import torch\nprint(torch.ones(1))\n", "0", "torch", False),   # no rendezvous at all
])
def test_which_spare_listens(tmp_path, text, rank, modules, want):
    script = tmp_path / "train.py"
    script.write_text(text)
    assert listens(["python3", str(script)], {"RANK": rank}, modules) is want


def test_a_listen_while_a_prime_holds_the_socket_goes_right_after_it():
    """listen() never waits (the restart is not held for an early store): while prime() holds
    the spare's socket its line is kept, and sent after the prime's or before go()'s, with the
    port, bound and listening from the listen() on (the spare serves it: spare.py _listen)."""
    import json
    import socket
    import threading

    from helpers.ports import free_port
    from mpilaunch.rank.inplace.prestart import Spare

    class Spec:
        env = {"RANK": "0", "WORLD_SIZE": "2"}
        argv = ["python", "train.py"]

    ours, theirs = socket.socketpair()
    spare = object.__new__(Spare)
    spare.sock, spare.send_lock, spare.pending = ours, threading.Lock(), b""
    spare.adopted, spare.primes, spare.store, spare.spec = False, 0, True, Spec()
    spare.proc, spare.exited = object(), threading.Event()
    port = int(free_port())
    with spare.send_lock:            # a prime() under way
        spare.listen(port)
    assert spare.pending          # kept, not sent: the socket was another's
    with pytest.raises(BlockingIOError):
        theirs.recv(1 << 16, socket.MSG_DONTWAIT)
    socket.create_connection(("127.0.0.1", port), timeout=5).close()   # listening already
    assert spare.prime(["json"]) and spare.pending == b"" and spare.pending_port is None
    got, fds = b"", []
    while got.count(b"\n") < 2:
        chunk, more, _, _ = socket.recv_fds(theirs, 1 << 16, 4)
        got, fds = got + chunk, fds + more
    lines = [json.loads(ln) for ln in got.splitlines()]
    assert lines == [{"import": ["json"]}, {"listen": port, "world": 2, "libuv": True, "fd": True}]
    assert len(fds) == 1
    with socket.socket(fileno=fds[0]) as handed:     # the port itself, ours closed: only the
        assert handed.getsockname()[1] == port       # spare's copy holds it
    ours.close()
    theirs.close()


@pytest.mark.parametrize("capeff, want", [
    ("000001fffeffffff", True),     # root with the full set
    ("00000000a80425fb", False),    # Docker's default set for root: no CAP_SYS_NICE
    ("0000000000800000", True),     # CAP_SYS_NICE alone
    ("0000000000000000", False),
])
def test_a_spare_is_started_idle_only_where_it_can_be_woken(capeff, want):
    from mpilaunch.rank.inplace.prestart import has_cap_sys_nice

    text = f"Name:\tpython3\nUid:\t0\t0\t0\t0\nCapPrm:\t{capeff}\nCapEff:\t{capeff}\n"
    assert has_cap_sys_nice(text) is want
    assert has_cap_sys_nice("Name:\tpython3\n") is False


MS_SCRIPT = "import numpy as np\nimport mindspore as ms\nfrom mindspore.communication import init\ninit()\n"


@pytest.mark.parametrize("role, argv, no_python, module, want", [
    ("worker", None, False, False, "mindspore,numpy"),
    ("scheduler", None, False, False, "mindspore,numpy"),   # rank 0's MindSpore scheduler too
    ("scheduler", ["numactl", "-N", "0"], False, False, ""),  # behind a NUMA wrapper: not python
    ("scheduler", None, True, False, ""),                     # --no-python
    ("scheduler", None, False, True, ""),                     # --module
    ("monitor", None, False, False, ""),                      # no other role
])
def test_which_child_gets_a_spare_and_what_it_imports(tmp_path, role, argv, no_python, module, want):
    from mpilaunch.rank.inplace.prestart import spare_modules
    from mpilaunch.rank.plan import ChildSpec

    script = tmp_path / "train.py"
    script.write_text(MS_SCRIPT)
    job = ["python3", str(script)]
    spec = ChildSpec(role=role, argv=(argv or []) + job, env={"MS_ROLE": "MS_SCHED"},
                     log_path=str(tmp_path / "x.log"))
    opts = SimpleNamespace(no_python=no_python, module=module)
    assert spare_modules(spec, job, opts) == want
    spec = spec._replace(env={"MPILAUNCH_SPARE_PRELOAD": " mindspore , "})
    assert spare_modules(spec, job, opts) == ("mindspore" if want else "")


class FakeSpare:
    """What InPlaceSupervisor reads of a spare: its process (None: not forked yet)."""

    def __init__(self, pid):
        self.proc = None if pid is None else SimpleNamespace(pid=pid)
        self.discarded = False

    def discard(self, at_once=False):
        self.discarded = True


@pytest.mark.parametrize("sched_child, worker_pid, sched_pid, kept, taken", [
    (True, 101, 102, {101, 102}, {"worker": 101, "scheduler": 102}),
    (True, 101, None, {101}, {"worker": 101}),          # the scheduler's not forked yet: dropped
    (False, 101, 102, {101}, {"worker": 101}),          # no scheduler child this attempt
    (True, None, 102, {102}, {"scheduler": 102}),
])
def test_an_attempt_takes_the_spare_of_each_child_it_has(tmp_path, sched_child, worker_pid,
                                                          sched_pid, kept, taken):
    """Each spare forked in time becomes its role's (kept by the supervisor's look for
    orphans until adopted); any other is discarded at once, never left behind."""
    from mpilaunch.rank.inplace.adopt import InPlaceSupervisor
    from mpilaunch.rank.plan import ChildSpec

    specs = [ChildSpec(role=r, argv=["python3", "t.py"], env={}, log_path=str(tmp_path / r))
             for r in (["scheduler"] if sched_child else []) + ["worker"]]
    worker, sched = FakeSpare(worker_pid), FakeSpare(sched_pid)
    sup = InPlaceSupervisor(specs, 0, "h", scheduler_grace=1.0, pipe_size=1 << 16,
                            tell_rank0=True, spare=worker, sched_spare=sched)
    assert sup.keep == kept
    assert {r: s.proc.pid for r, s in sup.spares.items()} == taken
    for s in (worker, sched):
        assert s.discarded is (s.proc is None or s.proc.pid not in kept)
