"""Which spare starts the next attempt's rendezvous store before its script runs
(mpilaunch/rank/inplace/prestart.py listens): rank 0's, for a torch script whose
init_process_group makes the env:// store, never where the script makes a store server of its
own or names an init_method (the port would be taken twice)."""
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
    the spare's socket its line is kept, and sent after the prime's or before go()'s."""
    import json
    import socket
    import threading

    from mpilaunch.rank.inplace.prestart import Spare

    class Spec:
        env = {"RANK": "0", "WORLD_SIZE": "2"}
        argv = ["python", "train.py"]

    ours, theirs = socket.socketpair()
    spare = object.__new__(Spare)
    spare.sock, spare.send_lock, spare.pending = ours, threading.Lock(), b""
    spare.adopted, spare.primes, spare.store, spare.spec = False, 0, True, Spec()
    spare.proc, spare.exited = object(), threading.Event()
    with spare.send_lock:            # a prime() under way
        spare.listen(29500)
    assert spare.pending          # kept, not sent: the socket was another's
    with pytest.raises(BlockingIOError):
        theirs.recv(1 << 16, socket.MSG_DONTWAIT)
    assert spare.prime(["json"]) and spare.pending == b""
    got = b""
    while got.count(b"\n") < 2:
        got += theirs.recv(1 << 16)
    lines = [json.loads(ln) for ln in got.splitlines()]
    assert lines == [{"import": ["json"]}, {"listen": 29500, "world": 2, "libuv": True}]
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
