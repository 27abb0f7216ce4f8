"""rank/inplace/spare.py, the real process: a ``listen`` that comes while the spare imports a
long list of learnt modules is done between two of them, not after the list (rank 0's store is
then up when the restart is decided, and the other ranks' clients find it instead of backing
off). Two modules of the list block until the test releases them; the store's port is
connected to while the second still blocks."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from helpers.ports import free_port
from helpers.procs import wait_for
from mpilaunch.rank.inplace.prestart import SPARE

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch.distributed"],
                   capture_output=True).returncode != 0, reason="torch not installed")

# says it started, then waits for the test's go file
BLOCKING = """\
import os, time
d = os.environ["SPARE_TEST_DIR"]
open(os.path.join(d, "started_" + __name__), "w").close()
while not os.path.exists(os.path.join(d, "go_" + __name__)):
    time.sleep(0.02)
"""


def _accepts(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def _spare(tmp_path, modules, blocking):
    """A real spare importing ``modules``, the ``blocking`` ones among them blocking until the
    test touches their go file; yields (its process, our end of its socket, its environment).
    On the way out no import is left blocking, our end is closed (EOF: the spare leaves) and
    the spare waited for; it must have left by itself."""
    for name in blocking:
        (tmp_path / f"{name}.py").write_text(BLOCKING)
    ours, theirs = socket.socketpair()
    env = dict(os.environ, SPARE_TEST_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(
        p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p))
    proc = subprocess.Popen([sys.executable, SPARE, modules, str(theirs.fileno())], env=env,
                            pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
    theirs.close()
    try:
        yield proc, ours, env
    finally:
        for name in blocking:
            (tmp_path / f"go_{name}").touch()
        ours.close()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0


def test_a_listen_during_learnt_imports_opens_the_store_before_the_last_one(tmp_path):
    port = int(free_port())
    with _spare(tmp_path, "torch", ("blocka", "blockb")) as (_, ours, _env):
        ours.settimeout(120)
        assert ours.recv(1) == b"+"          # torch imported: ready
        ours.sendall(json.dumps({"import": ["blocka", "blockb"]}).encode() + b"\n")
        assert wait_for(lambda: (tmp_path / "started_blocka").exists(), timeout=60)
        ours.sendall(json.dumps({"listen": port, "world": 1, "libuv": True}).encode() + b"\n")
        (tmp_path / "go_blocka").touch()
        assert wait_for(lambda: (tmp_path / "started_blockb").exists(), timeout=60)
        # blockb still blocks: the list is not done, and the store is up
        assert wait_for(lambda: _accepts(port), timeout=60), "no store while blockb imports"
        assert not (tmp_path / "go_blockb").exists()
        (tmp_path / "go_blockb").touch()
        assert ours.recv(1) == b"+"          # the list done


# a TCPStore client started before the store: prints what it read once its set/get went through
CLIENT = """\
import datetime, sys
from torch.distributed import TCPStore
c = TCPStore("127.0.0.1", int(sys.argv[1]), 2, False, timeout=datetime.timedelta(seconds=120))
c.set("k", "v")
print(c.get("k").decode(), flush=True)
"""


def test_the_port_handed_over_listens_before_the_spare_has_torch(tmp_path):
    # what rank 0's adapter does at a restart (prestart.py Spare.listen): the port bound at
    # once and sent with the line, while the spare is still importing (here: blocka, before
    # torch). A rank's worker that comes now waits in the backlog instead of being refused, and
    # the spare's store, once up, serves that very connection.
    from mpilaunch.rank.inplace.storeport import store_port

    port = int(free_port())
    client = None
    with _spare(tmp_path, "blocka,torch", ("blocka",)) as (_, ours, env):
        try:
            assert wait_for(lambda: (tmp_path / "started_blocka").exists(), timeout=60)
            bound = store_port(port)
            assert bound is not None
            socket.send_fds(ours, [json.dumps({"listen": port, "world": 2, "libuv": True,
                                               "fd": True}).encode() + b"\n"], [bound.fileno()])
            bound.close()                        # the spare's copy is the only one now
            assert _accepts(port), "the port is not listening while the spare imports"
            client = subprocess.Popen([sys.executable, "-c", CLIENT, str(port)], env=env,
                                      stdout=subprocess.PIPE, text=True)
            assert not (tmp_path / "go_blocka").exists()     # no store could be up yet
            (tmp_path / "go_blocka").touch()
            ours.settimeout(120)
            assert ours.recv(1) == b"+"          # torch imported: ready; the listen is done next
            out, _ = client.communicate(timeout=120)
            assert client.returncode == 0 and out.strip() == "v", (client.returncode, out)
        finally:
            if client is not None and client.poll() is None:
                client.kill()
                client.wait()
    assert not _accepts(port)                # the port went with the spare (its store with it)
