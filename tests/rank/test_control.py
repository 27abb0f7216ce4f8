"""The control channel without a launch (mpilaunch/supervise/control.py, mpilaunch/rank/control.py): the
launcher's socket and an adapter's link over loopback, real processes as the targets of the
signals it delivers. The key stays out of the workers' environment and is a secret; a command
is acted on once, only with the right MAC and a new sequence number; an endpoint that cannot
prove the key is skipped; SIGTSTP stops a process even where the kernel would discard it."""
import os
import signal
import socket
import subprocess
import sys
import threading

import psutil
import pytest

from mpilaunch import contract
from mpilaunch.supervise.control import Control, missing
from mpilaunch.rank import control
from helpers.procs import wait_for

# a parent that starts one child in a session of its own (an orphaned process group, as an
# MPICH rank's worker is); the child appends the signals it handles to OUT/<pid>
TREE = r'''
import os, signal, sys, time
out = sys.argv[1]
pid = os.fork()
if pid == 0:
    os.setsid()
    def note(signum, frame):
        with open(os.path.join(out, str(os.getpid())), "a") as f:
            f.write(signal.Signals(signum).name + "\n")
    signal.signal(signal.SIGUSR2, note)
    signal.signal(signal.SIGCONT, note)
    open(os.path.join(out, "child"), "w").write(str(os.getpid()))
    while True:
        time.sleep(0.05)
os.waitpid(pid, 0)
'''


@pytest.fixture
def tree(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", TREE, str(tmp_path)])
    try:
        assert wait_for(lambda: (tmp_path / "child").exists(), 10)
        yield proc, int((tmp_path / "child").read_text()), tmp_path
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True) + [psutil.Process(proc.pid)]:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.wait()


def _link(ctl, rank=3, pid=None):
    stops = []
    link = control.Link((ctl.env[control.ENDPOINT_VAR], ctl.token), rank, lambda: stops.append(1),
                        lambda text: stops.append(text))
    if pid is not None:
        link.pid = pid
    link.start()
    assert link.connected.wait(10), stops
    assert ctl.ranks() == [rank]        # counted before its ok went out
    return link, stops


def test_the_key_is_a_secret_taken_out_of_the_workers_environment():
    assert contract.is_secret(control.TOKEN_VAR) and not contract.is_secret(control.ENDPOINT_VAR)
    env = {control.ENDPOINT_VAR: "127.0.0.1:9", control.TOKEN_VAR: "k", "KEEP": "1"}
    assert control.take(env) == ("127.0.0.1:9", "k") and env == {"KEEP": "1"}
    assert control.take({"KEEP": "1"}) is None


def test_an_endpoint_without_its_key_is_said(capsys):
    assert control.take({control.ENDPOINT_VAR: "127.0.0.1:9"}) is None
    assert capsys.readouterr().err == (
        "mpilaunch.rank: MPILAUNCH_CONTROL came without MPILAUNCH_CONTROL_TOKEN: the starter "
        "did not pass the key to this rank; the launcher's graceful stop and the signals it "
        "delivers itself will not reach it\n")
    ctl = Control([])     # every rank here: loopback only
    try:
        assert ctl.env[control.ENDPOINT_VAR] == f"127.0.0.1:{ctl.port}"
        assert len(ctl.token) == 32 and ctl.names == (control.ENDPOINT_VAR, control.TOKEN_VAR)
    finally:
        ctl.close()
    assert control.parse_endpoint("10.0.0.1,127.0.0.1:5") == (["10.0.0.1", "127.0.0.1"], 5)
    with pytest.raises(ValueError):
        control.parse_endpoint("127.0.0.1")


def test_stop_and_signals_reach_the_descendants_once(tree):
    proc, child, out = tree
    ctl = Control([])
    try:
        link, stops = _link(ctl, pid=proc.pid)
        assert ctl.stop() == [3]
        assert wait_for(lambda: stops == [1], 5)
        assert ctl.signal(signal.SIGUSR2) == [3]
        assert wait_for(lambda: (out / str(child)).exists(), 5)
        # the default SIGTSTP of an orphaned process group is discarded by the kernel: sent
        # as SIGSTOP, and the parent (the adapter's place) is not signalled
        ctl.signal(signal.SIGTSTP)
        assert wait_for(lambda: psutil.Process(child).status() == psutil.STATUS_STOPPED, 5)
        assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED
        ctl.signal(signal.SIGCONT)
        assert wait_for(lambda: psutil.Process(child).status() != psutil.STATUS_STOPPED, 5)
        assert wait_for(lambda: (out / str(child)).read_text() == "SIGUSR2\nSIGCONT\n", 5)
        assert stops == [1]
    finally:
        ctl.close()
    link.join(5)
    assert not link.is_alive()      # the launcher's end closed: the link ends


def test_a_forged_or_replayed_command_is_ignored():
    ctl = Control([])
    try:
        link, stops = _link(ctl)
        conn, nonce = ctl.peers[3]
        good = control.mac(ctl.token, nonce, 5, "stop")
        conn.sendall(f"5 stop {'0' * 64}\n".encode())                      # wrong MAC
        conn.sendall(f"5 stop {control.mac('other', nonce, 5, 'stop')}\n".encode())   # other key
        conn.sendall(f"5 sig 9 {good}\n".encode())                         # MAC of another command
        conn.sendall(f"5 stop {good}\n".encode())                          # the real one
        conn.sendall(f"5 stop {good}\n".encode())                          # replayed
        conn.sendall(f"4 stop {control.mac(ctl.token, nonce, 4, 'stop')}\n".encode())  # older
        # one more real command: the link acts on its lines in order, so once this one is
        # acted on, every line before it has been read
        conn.sendall(f"6 stop {control.mac(ctl.token, nonce, 6, 'stop')}\n".encode())
        assert wait_for(lambda: len(stops) == 2, 10), stops
        assert stops == [1, 1]
    finally:
        ctl.close()


def test_an_endpoint_that_cannot_prove_the_key_is_skipped():
    ctl = Control([])
    fake = socket.create_server(("127.0.0.2", ctl.port))
    seen = []

    def impostor():
        conn, _ = fake.accept()
        seen.append(conn.recv(200).decode())
        conn.sendall(b"ok " + b"0" * 64 + b"\n")
        conn.close()

    t = threading.Thread(target=impostor, daemon=True)
    t.start()
    try:
        stops = []
        link = control.Link((f"127.0.0.2,127.0.0.1:{ctl.port}", ctl.token), 0,
                            lambda: stops.append(1), stops.append)
        link.start()
        assert link.connected.wait(10), stops
        t.join(5)
        assert seen and seen[0].startswith("hello 0 ")
        assert ctl.ranks() == [0]
        assert ctl.stop() == [0] and wait_for(lambda: stops == [1], 5)
    finally:
        fake.close()
        ctl.close()


def test_an_adapter_that_read_its_ok_is_already_a_peer():
    """The launcher answers a hello and counts the adapter under one lock: once an adapter is
    connected, every command the launcher sends reaches it (the ok went out before the peer
    was recorded, and a check right after connecting missed the adapter, 5 in 300 here)."""
    ctl = Control([])
    links = []
    try:
        for rank in range(150):
            link = control.Link((ctl.env[control.ENDPOINT_VAR], ctl.token), rank, lambda: None,
                                print)
            link.start()
            links.append(link)
            assert link.connected.wait(10)
            assert rank in ctl.ranks(), rank
    finally:
        ctl.close()
    for link in links:
        link.join(5)


def test_no_launcher_at_the_endpoint_is_one_warning():
    port = socket.create_server(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    said = []
    link = control.Link((f"127.0.0.1:{free}", "k"), 2, lambda: said.append("stop"), said.append)
    link.start()
    link.join(10)
    assert said == [f"cannot reach the launcher's control port at 127.0.0.1:{free}: its graceful "
                    "stop and the signals it delivers itself will not reach this rank"]


def test_missing_names_the_ranks_not_reached():
    assert missing([0, 1, 2], 3) == ""
    assert missing([0, 2], 3) == (" (not reached: rank 1: not connected to the launcher's "
                                  "control port)")
    assert missing([], 10).endswith("rank 0, 1, 2, 3, 4, 5, 6, 7, ...: not connected to the "
                                    "launcher's control port)")


def _watched_link():
    """A connected adapter's link whose ``on_gone`` sets the returned event."""
    ctl = Control([])
    gone = threading.Event()
    link = control.Link((ctl.env[control.ENDPOINT_VAR], ctl.token), 1, lambda: None,
                        lambda text: None, on_gone=gone.set)
    link.start()
    assert link.connected.wait(10)
    return ctl, link, gone


def test_the_launcher_closing_the_connection_while_the_rank_runs_ends_it():
    # the launcher closes the channel only once the attempt's starter has ended: a rank still
    # running then outlived its job (its daemon ended without it), on whatever host
    ctl, link, gone = _watched_link()
    assert not gone.is_set()
    ctl.close()
    assert gone.wait(10)
    link.join(10)


def test_a_rank_that_said_its_last_word_is_not_ended_again():
    ctl, link, gone = _watched_link()
    link.say_bye()
    assert wait_for(lambda: 1 in ctl.said_bye, 10)
    ctl.close()
    link.join(10)
    assert not link.is_alive() and not gone.is_set()
