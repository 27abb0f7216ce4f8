"""In-place restarts (mpilaunch/rank/inplace/loop.py ``Restarts``): the coordinator's word of a
restart that reaches a rank after the rank went on to that attempt by itself (a rank whose own
worker failed waits for the client's ``latest``, not for the word) is dropped, and does not
tear down the attempt it announced. Loopback TCP and the real coordinator, in one process; the
late delivery is held by the test, released once the rank's next attempt runs."""
import _queue
import json
import threading
from types import SimpleNamespace

from mpilaunch.contract import STATUS_PREFIX
from mpilaunch.rank.inplace import coordinate
from mpilaunch.rank.inplace.loop import Restarts
from mpilaunch.rank.runner import Inbox
from mpilaunch.rank.supervisor import RESTART

from helpers.ports import free_port
from helpers.procs import wait_for


def _status_lines(text):
    return [json.loads(ln[len(STATUS_PREFIX):]) for ln in text.splitlines()
            if ln.startswith(STATUS_PREFIX)]


def _opts(port):
    lr = SimpleNamespace(restart_count=0, max_restarts=2, in_place=port, no_progress=None)
    return SimpleNamespace(resilience=lr)


def test_a_restart_heard_after_the_rank_went_on_to_it_does_not_stop_that_attempt(capfd):
    port = int(free_port())
    coord = coordinate.Coordinator(port, 0, 2, 2, "h0")
    rank0 = coordinate.Client(0, lambda ev: None, coordinator=coord)
    inbox = Inbox()
    rank1 = Restarts(inbox, _opts(port), 1, "h1", "127.0.0.1", 2, ["python3", "train.py"],
                     lambda k, p: [("worker", k, p)])
    release, delivered = threading.Event(), threading.Event()
    real = rank1.client.deliver

    def late(ev):          # the client thread, slow between `latest` and the delivery
        release.wait(30)
        real(ev)
        delivered.set()

    rank1.client.deliver = late
    try:
        assert rank1.client.connected.wait(30)
        assert wait_for(lambda: len(coord.conns) == 1, timeout=30)
        assert rank0.fail(0, {"rank": 1, "host": "h1", "role": "worker", "code": 1,
                              "signal": None, "t": 1.0})
        assert wait_for(lambda: rank1.client.latest is not None, timeout=30)
        new_port = rank1.client.latest[1]
        # the rank goes on to attempt 1 (as Restarts._wait returns on `latest`) and runs it
        assert rank1.next(SimpleNamespace(jobdone=None), RESTART) == [("worker", 1, new_port)]
        attempt1 = SimpleNamespace(events=_queue.SimpleQueue())
        inbox.attach(attempt1, rank1.k)
        release.set()
        assert delivered.wait(30)
        assert attempt1.events.empty()       # before: ("restart", 1), and attempt 1 torn down
        # the launcher's phases (attempts/phases.py) still have this rank's "told" line, once,
        # before its "stopped" one
        life = [(d["event"], d["code"]) for d in _status_lines(capfd.readouterr().err)
                if d["rank"] == 1 and d["cause"] == "life"]
        assert life == [("restart", 1), ("stopped", 0)], life
        rank1.client.restart(2, new_port + 1)   # the next restart still reaches it
        assert attempt1.events.get(timeout=5) == ("restart", 2)
    finally:
        release.set()
        rank1.close()
        rank0.close()
        coord.close()
