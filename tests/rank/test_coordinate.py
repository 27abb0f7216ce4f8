"""In-place restarts, the adapters' coordination (mpilaunch/rank/inplace/coordinate.py), in one
process over loopback TCP: the first failure of an attempt restarts every rank on a fresh port,
later ones of the same attempt change nothing, the status line names the earliest failure,
the budget's last attempt is not restarted, and the finished workers' barrier."""
import json
import queue
import socket
import time

import pytest

from helpers.procs import wait_for
from mpilaunch.contract import STATUS_PREFIX
from mpilaunch.rank.inplace import coordinate


def _port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _job(size, attempt=0, last=2, no_progress=None):
    port = _port()
    coord = coordinate.Coordinator(port, attempt, last, size, "h0", no_progress)
    boxes = [queue.SimpleQueue() for _ in range(size)]
    clients = [coordinate.Client(0, boxes[0].put, coordinator=coord)]
    clients += [coordinate.Client(r, boxes[r].put, addr="127.0.0.1", port=port)
                for r in range(1, size)]
    for c in clients:
        assert c.connected.wait(5)
    deadline = time.monotonic() + 5
    while len(coord.conns) < size - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return coord, clients, boxes


def _status_lines(text):
    return [json.loads(ln[len(STATUS_PREFIX):]) for ln in text.splitlines()
            if ln.startswith(STATUS_PREFIX)]


def test_a_failure_restarts_every_rank_once_and_names_the_earliest(capfd):
    coord, clients, boxes = _job(3)
    try:
        assert clients[2].fail(0, {"rank": 2, "host": "h2", "role": "worker", "code": 137,
                                   "signal": 9, "t": 10.0})
        got = [b.get(timeout=5) for b in boxes]
        assert got == [("restart", 1)] * 3
        port = clients[0].latest[1]
        assert all(c.latest == (1, port) for c in clients) and port > 0
        # a consequence (rank 1's gloo broke), reported later but stamped earlier: no second
        # restart, and the status line names the earliest failure the window gathered
        assert clients[1].fail(0, {"rank": 1, "host": "h1", "role": "worker", "code": 1,
                                   "signal": None, "t": 9.0})
        time.sleep(coordinate.ROOT_WINDOW + 0.3)
        assert all(b.empty() for b in boxes)
        lines = _status_lines(capfd.readouterr().err)
        assert len(lines) == 1
        assert (lines[0]["event"], lines[0]["rank"], lines[0]["code"], lines[0]["cause"]) == (
            coordinate.RESTART_EVENT, 1, 1, "restart")
        assert lines[0]["message"] == "attempt 0 failed; attempt 1 started in place"
        # a stale report of attempt 0 after attempt 1 began changes nothing
        clients[2].fail(0, {"rank": 2, "t": 11.0})
        time.sleep(0.2)
        assert all(b.empty() for b in boxes) and coord.attempt == 1
    finally:
        for c in clients:
            c.close()
        coord.close()


def test_the_last_attempt_of_the_budget_is_not_restarted(capfd):
    coord, clients, boxes = _job(2, attempt=1, last=1)
    try:
        clients[1].fail(1, {"rank": 1, "t": 1.0})
        time.sleep(coordinate.ROOT_WINDOW + 0.3)
        assert all(b.empty() for b in boxes) and coord.attempt == 1
        assert _status_lines(capfd.readouterr().err) == []
    finally:
        for c in clients:
            c.close()
        coord.close()


def test_the_limit_of_idle_attempts_ends_the_failed_rank_instead_of_a_restart(capfd):
    """--max_no_progress_restarts 2: attempt 0 fails at once (idle), attempt 1 too: that one is
    not restarted; the adapter that reported it is told to end, the others hear nothing (the
    starter ends them when that adapter exits with its worker's status)."""
    coord, clients, boxes = _job(2, last=5, no_progress=2)
    try:
        clients[1].fail(0, {"rank": 1, "t": time.time(), "first_output": None})
        assert [b.get(timeout=5) for b in boxes] == [("restart", 1)] * 2
        clients[0].fail(1, {"rank": 0, "t": time.time(), "first_output": None})
        assert boxes[0].get(timeout=5) == ("end", 1)
        assert clients[0].ended == 1 and coord.attempt == 1
        clients[1].fail(1, {"rank": 1, "t": time.time()})    # its consequence: the same answer
        assert boxes[1].get(timeout=5) == ("end", 1)
    finally:
        for c in clients:
            c.close()
        coord.close()


@pytest.mark.parametrize("info, age, idle", [
    ({"t": 100.0, "first_output": None}, 60.0, True),    # never wrote
    ({"t": 100.0, "first_output": 97.0}, 60.0, True),    # wrote its dying words
    ({"t": 100.0, "first_output": 90.0}, 60.0, False),   # wrote, went on 10 s
    ({"t": 100.0, "first_output": 90.0}, 2.0, True),     # younger than QUICK: nobody went on
])
def test_no_progress_rule(info, age, idle):
    assert coordinate.no_progress(info, age) is idle


def test_finish_only_once_every_rank_is_done():
    coord, clients, boxes = _job(3)
    try:
        clients[0].done(0)
        clients[2].done(0)
        clients[2].done(0)        # counted once
        time.sleep(0.2)
        assert all(b.empty() for b in boxes)
        clients[1].done(0)
        assert [b.get(timeout=5) for b in boxes] == [("finish", 0)] * 3
        assert all(c.finished == 0 for c in clients)
    finally:
        for c in clients:
            c.close()
        coord.close()


def test_a_late_adapter_learns_where_everyone_is():
    port = _port()
    coord = coordinate.Coordinator(port, 0, 3, 2, "h0")
    box0 = queue.SimpleQueue()
    local = coordinate.Client(0, box0.put, coordinator=coord)
    try:
        local.fail(0, {"rank": 0, "t": 1.0})
        assert box0.get(timeout=5) == ("restart", 1)
        box1 = queue.SimpleQueue()
        late = coordinate.Client(1, box1.put, addr="127.0.0.1", port=port)
        assert box1.get(timeout=5) == ("restart", 1) and late.latest == local.latest
        late.close()
    finally:
        coord.close()


def test_a_port_taken_on_rank_0s_host_is_an_oserror():
    s = socket.socket()
    s.bind(("", 0))
    s.listen(1)
    try:
        with pytest.raises(OSError):
            coordinate.Coordinator(s.getsockname()[1], 0, 1, 2, "h0")
    finally:
        s.close()


def test_the_restart_word_says_held_only_for_a_port_the_holder_acknowledged():
    """Rank 0's store holder (rank/inplace/hold.py) is asked before the word goes: every rank,
    a late one too, hears ``held`` with the port it acknowledged; an ask it failed gives the
    attempt another port (a slow holder may still bind the asked one) and no ``held``."""
    coord, clients, boxes = _job(2, last=3)
    asked = []
    answers = [True, False]
    coord.hold = lambda k, port: asked.append((k, port)) or answers[len(asked) - 1]
    try:
        clients[1].fail(0, {"rank": 1, "t": 1.0})
        assert [b.get(timeout=5) for b in boxes] == [("restart", 1)] * 2
        assert all(c.latest == (1, asked[0][1]) and c.held == {1} for c in clients)
        late = coordinate.Client(2, queue.SimpleQueue().put, addr="127.0.0.1",
                                 port=coord.sock.getsockname()[1])
        assert wait_for(lambda: late.latest == (1, asked[0][1])) and late.held == {1}
        late.close()
        clients[0].fail(1, {"rank": 0, "t": 2.0})
        assert [b.get(timeout=5) for b in boxes] == [("restart", 2)] * 2
        assert asked[1][0] == 2
        assert all(c.latest[0] == 2 and c.latest[1] != asked[1][1] and c.held == {1}
                   for c in clients)
    finally:
        for c in clients:
            c.close()
        coord.close()
