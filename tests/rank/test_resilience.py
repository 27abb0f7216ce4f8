"""mpilaunch/rank/resilience.py without a launch: the resilience options read and checked, SIGUSR1
left to the workers, the variables every worker sees, the graceful stop's grace on a stop
signal and the watchdog wired to the worker. No process is started."""
import os
import queue
import signal
import subprocess
import sys
import threading
from types import SimpleNamespace

import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank import resilience, watchdog
from mpilaunch.rank.identity import RankInfo
from mpilaunch.rank.resilience import ResilienceFlags


def _ns(restart_count=None, max_restarts=None, term_grace=None, stall_timeout=None, expect_ranks=None):
    return SimpleNamespace(restart_count=restart_count, max_restarts=max_restarts,
                           term_grace=term_grace, stall_timeout=stall_timeout,
                           expect_ranks=expect_ranks)


# --------------------------------------------------------------------------- parse

def test_parse_converts_each_value_and_keeps_absent_ones_none():
    assert resilience.parse(_ns("2", "3", "2.5", "60", "4;exact;a:2,b:2")) == ResilienceFlags(2, 3, 2.5, 60.0, "4;exact;a:2,b:2")
    assert resilience.parse(_ns()) == ResilienceFlags(None, None, None, None, None)
    assert resilience.parse(_ns("0", "0", "0", "0")) == ResilienceFlags(0, 0, 0.0, 0.0, None)


@pytest.mark.parametrize("ns, message", [
    (_ns(restart_count="x"), "--restart-count='x': not a whole number; give a whole number at least 0"),
    (_ns(max_restarts="-1"), "--max-restarts='-1': out of range; give a whole number at least 0"),
    (_ns(term_grace="-1"), "--term-grace='-1': out of range; give a number of seconds, 0 or more"),
    (_ns(stall_timeout="inf"), "--stall-timeout='inf': out of range; give a number of seconds, 0 or more"),
    (_ns(expect_ranks="4;diagonal;a:4"), "--expect-ranks '4;diagonal;a:4': not N;MODE;host:count,..."),
])
def test_parse_refuses_bad_values_in_one_line(ns, message):
    with pytest.raises(UsageError) as exc:
        resilience.parse(ns)
    assert str(exc.value) == message


# --------------------------------------------------------------------------- early

@pytest.fixture
def restore_sigusr1():
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    handler = signal.getsignal(signal.SIGUSR1)
    yield
    signal.signal(signal.SIGUSR1, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def test_early_leaves_sigusr1_to_the_workers_with_or_without_a_grace(restore_sigusr1):
    # the graceful stop has its own channel: a blocked or ignored SIGUSR1 would reach the
    # workers ignored (exec passes SIG_IGN on), and a user's SIGUSR1 is theirs
    before = signal.getsignal(signal.SIGUSR1)
    resilience.early(SimpleNamespace(resilience=None, exec_=False))
    resilience.early(SimpleNamespace(resilience=ResilienceFlags(1, 2, None, 5.0, None), exec_=True))
    resilience.early(SimpleNamespace(resilience=ResilienceFlags(None, None, 30.0, None, None), exec_=False))
    assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert signal.getsignal(signal.SIGUSR1) == before


def test_early_refuses_a_grace_under_exec(restore_sigusr1):
    with pytest.raises(UsageError) as exc:
        resilience.early(SimpleNamespace(resilience=ResilienceFlags(None, None, 30.0, None, None), exec_=True))
    assert str(exc.value) == "--term-grace needs the supervised mode (not --exec)"
    assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])


# --------------------------------------------------------------------------- prepare

INFO = RankInfo(1, 4, 1, 2, None, None, "node-b", "openmpi")   # rank 1: 2 ranks on its host


def test_prepare_gives_every_worker_the_restart_count_and_the_heartbeat(tmp_path):
    env = {"KEEP": "1"}
    opts = SimpleNamespace(resilience=ResilienceFlags(2, 3, None, 60.0, "4;exact;node-a:2,node-b:2"), log_dir=str(tmp_path))
    resilience.prepare(opts, INFO, env)
    assert env == {"KEEP": "1",
                   "MPILAUNCH_RESTART_COUNT": "2", "TORCHELASTIC_RESTART_COUNT": "2",
                   "MPILAUNCH_MAX_RESTARTS": "3", "TORCHELASTIC_MAX_RESTARTS": "3",
                   "MPILAUNCH_HEARTBEAT_FILE": str(tmp_path / "heartbeat_1")}


def test_prepare_adds_nothing_unasked(tmp_path):
    env = {}
    resilience.prepare(SimpleNamespace(resilience=None, log_dir=str(tmp_path)), INFO, env)
    resilience.prepare(SimpleNamespace(resilience=ResilienceFlags(0, None, 5.0, 0.0, None), log_dir=str(tmp_path)), INFO, env)
    assert env == {"MPILAUNCH_RESTART_COUNT": "0", "TORCHELASTIC_RESTART_COUNT": "0"}   # 0 s: no watchdog


def test_prepare_stops_a_rank_that_runs_off_plan_before_setting_anything(tmp_path):
    env = {}
    opts = SimpleNamespace(resilience=ResilienceFlags(2, 3, None, None, "4;exact;node-a:3,node-b:1"), log_dir=str(tmp_path))
    with pytest.raises(UsageError) as exc:
        resilience.prepare(opts, INFO, env)
    # the rest of the paragraph (planned, running, usual causes) is span.py's, tested there
    assert str(exc.value).startswith(
        "the ranks do not run where the plan put them (rank 1 was planned on node-a with 3 rank(s) "
        "there, but its host node-b runs 2); nothing started. ")
    assert env == {}


# --------------------------------------------------------------------------- graceful stop

def test_a_stop_signal_gets_the_grace_and_is_remembered():
    from mpilaunch.rank.supervisor import Supervisor

    # the teardown signals parent_pid's orphans; here that would be every child of the test
    # runner (the session's sshds, Slurm daemons): a parent of the supervisor's own, childless
    lone = subprocess.Popen(["sleep", "60"])
    try:
        sup = Supervisor([], 0, "node-a")
        sup.parent_pid = lone.pid
        assert (sup.kill_grace, sup.signal_grace, sup.stop_signal) == (2.0, None, None)
        assert sup._teardown(signal.SIGHUP) == 129        # no --term-grace: the usual 2 s
        assert (sup.kill_grace, sup.stop_signal) == (2.0, signal.SIGHUP)
        sup = Supervisor([], 0, "node-a")
        sup.parent_pid = lone.pid
        sup.signal_grace = 7.5                            # what supervise() sets for --term-grace
        assert sup._teardown(signal.SIGTERM) == 143
        assert (sup.kill_grace, sup.stop_signal) == (7.5, signal.SIGTERM)
        assert lone.poll() is None
    finally:
        lone.kill()
        lone.wait()


def test_the_grace_event_the_launcher_reads():
    assert resilience.GRACE_EVENT == "grace-stop"


# --------------------------------------------------------------------------- the watchdog's wiring

def test_no_worker_no_watchdog(tmp_path):
    sup = SimpleNamespace(children={"scheduler": object()})
    assert resilience.start_watchdog(sup, SimpleNamespace(log_dir=str(tmp_path)), 0, "h", 5.0) is None


def test_the_watchdog_watches_the_workers_log_heartbeat_pid_and_status(tmp_path, monkeypatch):
    (tmp_path / "venv").mkdir()
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "python"))   # no py-spy beside
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "py-spy").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "py-spy").chmod(0o755)
    worker = SimpleNamespace(proc=None, status=None,
                             spec=SimpleNamespace(log_path=str(tmp_path / "logs" / "worker_3.log"),
                                                  env={"PATH": str(tmp_path / "bin")}))
    sup = SimpleNamespace(children={"worker": worker})
    dog = resilience.start_watchdog(sup, SimpleNamespace(log_dir=str(tmp_path / "logs")), 3, "node-c", 60.0)
    try:
        assert isinstance(dog, watchdog.Watchdog) and dog.is_alive()
        assert dog.paths == (str(tmp_path / "logs" / "worker_3.log"), str(tmp_path / "logs" / "heartbeat_3"))
        assert (dog.stacks, dog.timeout, dog.rank, dog.host) == (
            str(tmp_path / "logs" / "stacks_3.txt"), 60.0, 3, "node-c")
        assert dog.py_spy == str(tmp_path / "bin" / "py-spy")
        assert dog.pid_of() is None and dog.status_of() is None
        worker.proc, worker.status = SimpleNamespace(pid=4321), 0
        assert dog.pid_of() == 4321 and dog.status_of() == 0
    finally:
        dog.done.set()
        dog.join(5)
    assert not dog.is_alive()
    assert not os.path.exists(tmp_path / "logs" / "stacks_3.txt")
