"""rank/runner.py's Inbox (what other threads deliver: to the running supervisor, else kept
for the next one) and rank/resilience.py's Hooks (the launcher's stop taken once, the status after a
stop signal), without processes: the whole entry point runs in the adapter tests."""
import json
import signal
from types import SimpleNamespace

from mpilaunch.contract import STATUS_PREFIX
from mpilaunch.rank import runner
from mpilaunch.rank.resilience import Hooks, ResilienceFlags
from mpilaunch.rank.relay import PIPE_SIZE, PIPE_SIZE_MANY_RANKS, pipe_size


def _drain(q):
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except runner.queue.Empty:
            return out


def _sup():
    return SimpleNamespace(events=runner.queue.SimpleQueue())


def test_the_inbox_keeps_what_matters_for_the_next_supervisor():
    inbox = runner.Inbox()
    inbox.put(("signal", signal.SIGTERM))      # before any supervisor: kept
    inbox.put(("restart", 1))                  # a restart to the attempt about to run: done
    inbox.put(("restart", 2))
    inbox.put(("exit", "worker"))              # not one that outlives a supervisor
    first = _sup()
    inbox.attach(first, attempt=1)
    assert _drain(first.events) == [("signal", signal.SIGTERM), ("restart", 2)]
    inbox.put(("finish", 2))                   # while it runs: straight to its queue
    inbox.put(("peer-done", 3))
    inbox.detach()                             # what still matters waits for the next one
    assert _drain(inbox.waiting) == [("finish", 2)]
    inbox.put(("signal", signal.SIGINT))       # between supervisors
    second = _sup()
    inbox.attach(second)
    assert _drain(second.events) == [("signal", signal.SIGINT)]


def test_the_pipe_size_rule():
    assert [pipe_size(n) for n in (1, 8, 9, 64)] == [PIPE_SIZE, PIPE_SIZE, PIPE_SIZE_MANY_RANKS,
                                                     PIPE_SIZE_MANY_RANKS]


def test_the_launchers_stop_is_taken_once_and_only_with_term_grace(capfd):
    got = []
    hooks = Hooks(ResilienceFlags(None, None, 5.0, None, None), got.append)
    hooks.on_stop()
    hooks.on_stop()
    assert got == [("signal", signal.SIGTERM)] and hooks.asked
    quiet = Hooks(ResilienceFlags(None, None, None, None, None), got.append)
    quiet.on_stop()
    assert got == [("signal", signal.SIGTERM)] and not quiet.asked
    # after the stop: the launcher's own (0) or the signal the adapter got, and exit 0
    assert hooks.stopped(SimpleNamespace(stop_signal=signal.SIGTERM), 3, "node-c", 143) == 0
    fresh = Hooks(ResilienceFlags(None, None, 5.0, None, None), got.append)
    assert fresh.stopped(SimpleNamespace(stop_signal=signal.SIGHUP), 3, "node-c", 129) == 0
    assert quiet.stopped(SimpleNamespace(stop_signal=signal.SIGHUP), 3, "node-c", 129) == 129
    lines = [json.loads(line[len(STATUS_PREFIX):]) for line in capfd.readouterr().err.splitlines()
             if line.startswith(STATUS_PREFIX)]
    assert [(d["event"], d["code"], d["signal"], d["cause"]) for d in lines] == [
        ("grace-stop", 143, 0, "grace"), ("grace-stop", 129, signal.SIGHUP, "grace")]
