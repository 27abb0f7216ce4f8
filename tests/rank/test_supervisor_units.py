"""mpilaunch/rank/supervisor.py piece by piece, inside this process and without Supervisor.run
(which would make the test runner a subreaper and take its signals; tests/rank/test_supervisor.py
runs whole adapters): exit statuses, starting one child (refused during teardown, a missing or
non-executable program, its output to the log or relayed with the rank prefix), waiting for a
signal behind a child's exit, and the exact status lines of a report.

A teardown here (``_terminate``) signals the orphans of ``parent_pid``, which is the adapter's
own pid in a real rank: in this process that would be every child of the test runner (the
session's sshds and Slurm daemons), so such tests give the supervisor a parent of their own
(``stand_in``)."""
import os
import queue
import signal
import subprocess
import sys
import time

import pytest

from helpers.adapter import status_lines
from mpilaunch.rank import supervisor
from mpilaunch.rank.plan import ChildSpec
from mpilaunch.rank.relay import PIPE_SIZE


@pytest.mark.parametrize("returncode, status", [(0, 0), (3, 3), (255, 255), (-9, 137), (-15, 143)])
def test_exit_status_is_shell_style(returncode, status):
    assert supervisor.exit_status(returncode) == status


def _spec(tmp_path, argv, role="worker", tail_prefix=None, env=None):
    return ChildSpec(role, argv, env if env is not None else dict(os.environ),
                     str(tmp_path / f"{role}_0.log"), tail_prefix)


def _sup(*specs, **kw):
    return supervisor.Supervisor(list(specs), 0, "node-a", **kw)


def _open(child):
    child.log_fd = os.open(child.spec.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    return child.log_fd


def _closed(fd):
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def _drain(q):
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


@pytest.fixture
def stand_in():
    """A process with one child (``sleep``), to stand in for the adapter in a teardown:
    -> (its pid, the child's pid)."""
    p = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                          "c = subprocess.Popen(['sleep', '60']); print(c.pid, flush=True); "
                          "c.wait(); sys.stdin.read()"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    child = int(p.stdout.readline())
    yield p.pid, child
    p.kill()
    p.wait()


def _running(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_teardown_ends_the_orphans_of_its_own_process_only(stand_in):
    """The adapter's orphans (here: the stand-in's child) end; a process that is not below the
    adapter (this runner's own child) is never signalled."""
    parent, orphan = stand_in
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        sup = _sup()
        sup.parent_pid = parent
        sup._terminate([], cause="terminated")
        end = time.monotonic() + 5
        while _running(orphan) and time.monotonic() < end:
            time.sleep(0.02)
        assert not _running(orphan)
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def test_a_supervisor_keys_its_children_by_role(tmp_path):
    w, s = _spec(tmp_path, ["w"]), _spec(tmp_path, ["s"], role="scheduler")
    sup = _sup(w, s)
    assert sorted(sup.children) == ["scheduler", "worker"]
    assert sup.children["worker"].spec is w and sup.children["worker"].status is None
    assert (sup.scheduler_grace, sup.kill_grace, sup.pipe_size, sup.tell_rank0) == (300.0, 2.0, PIPE_SIZE, True)
    assert not sup.stopping and sup.parent_pid == os.getpid()


# --------------------------------------------------------------------------- starting one child

def test_nothing_starts_once_the_rank_is_being_torn_down(tmp_path, stand_in):
    sup = _sup(_spec(tmp_path, [sys.executable, "-c", "open('STARTED', 'w')"]))
    child = sup.children["worker"]
    fd = _open(child)
    runner_pid, sup.parent_pid = sup.parent_pid, stand_in[0]    # the teardown's orphans: its
    sup._terminate([child], cause="terminated")      # never started: nothing to signal or report
    sup.parent_pid = runner_pid                      # a start checks its parent is the adapter
    assert sup.stopping and not child.reported
    sup._start_and_wait(child)
    assert child.proc is None and child.start_error == "not started: the rank is being torn down"
    assert _drain(sup.events) == [("exit", "worker")]
    assert _closed(fd) and not (tmp_path / "STARTED").exists()


def test_a_missing_program_is_127_and_a_non_executable_one_126(tmp_path):
    missing = str(tmp_path / "nope")
    plain = tmp_path / "plain.sh"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    for argv0, status, why in ((missing, 127, "No such file or directory"), (str(plain), 126, "Permission denied")):
        sup = _sup(_spec(tmp_path, [argv0]))
        child = sup.children["worker"]
        fd = _open(child)
        sup._start_and_wait(child)
        assert (child.status, child.start_error) == (status, f"cannot start {argv0}: {why}")
        assert child.proc is None and _drain(sup.events) == [("exit", "worker")] and _closed(fd)


def test_a_child_writes_straight_to_its_log_and_its_status_is_recorded(tmp_path):
    sup = _sup(_spec(tmp_path, [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]))
    child = sup.children["worker"]
    _open(child)
    sup._start_and_wait(child)
    assert (child.status, child.signal, child.start_error, child.relay) == (3, None, None, None)
    assert _drain(sup.events) == [("exit", "worker")]
    assert sorted(open(child.spec.log_path).read().splitlines()) == ["err", "out"]


def test_a_child_killed_by_a_signal_is_128_plus_n(tmp_path):
    sup = _sup(_spec(tmp_path, [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]))
    child = sup.children["worker"]
    _open(child)
    sup._start_and_wait(child)
    assert (child.status, child.signal) == (143, signal.SIGTERM)


def test_a_tailed_child_is_relayed_with_the_rank_prefix_and_logged_verbatim(tmp_path):
    console = tmp_path / "console"
    out_fd = os.open(console, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        sup = _sup(_spec(tmp_path, [sys.executable, "-c", "print('a'); print('b')"], tail_prefix=b"[rank0] "),
                   stdout_fd=out_fd)
        child = sup.children["worker"]
        _open(child)
        sup._start_and_wait(child)
        sup._finish_relay(child)
        assert child.status == 0 and not child.relay.is_alive()
    finally:
        os.close(out_fd)
    assert open(child.spec.log_path).read() == "a\nb\n"
    assert console.read_text() == "[rank0] a\n[rank0] b\n"


def test_an_error_in_a_child_thread_still_ends_the_wait(tmp_path, monkeypatch):
    sup = _sup(_spec(tmp_path, ["w"]))
    child = sup.children["worker"]

    def boom(c):
        raise RuntimeError("boom")
    monkeypatch.setattr(sup, "_start_and_wait", boom)
    with pytest.raises(RuntimeError):
        sup._run_child(child)
    assert (child.status, child.start_error) == (127, "cannot start worker: boom")
    assert _drain(sup.events) == [("exit", "worker")]


# --------------------------------------------------------------------------- events

def test_a_signal_right_behind_a_childs_exit_is_found_and_other_events_kept(tmp_path):
    sup = _sup(_spec(tmp_path, ["w"]))
    for ev in (("exit", "worker"), ("sigchld", None), ("signal", signal.SIGTERM), ("exit", "scheduler")):
        sup.events.put(ev)
    assert sup._pending_signal(1.0) == signal.SIGTERM
    assert sorted(_drain(sup.events), key=str) == [("exit", "scheduler"), ("exit", "worker"), ("sigchld", None)]


def test_no_signal_within_the_window_gives_none_and_keeps_every_event_in_order(tmp_path):
    sup = _sup(_spec(tmp_path, ["w"]))
    sup.events.put(("sigchld", None))
    sup.events.put(("peer-done", 1))
    assert sup._pending_signal(0.2) is None
    assert _drain(sup.events) == [("sigchld", None), ("peer-done", 1)]


# --------------------------------------------------------------------------- reports

def test_a_start_failure_is_reported_once_with_its_reason(tmp_path, capfd):
    sup = _sup(_spec(tmp_path, ["w"]))
    child = sup.children["worker"]
    child.status, child.start_error = 127, "cannot start w: No such file or directory"
    sup._report(child, cause="self")
    sup._report(child, cause="self")
    [line] = status_lines(capfd.readouterr().err)
    assert {k: line[k] for k in ("rank", "host", "role", "event", "code", "signal", "cause", "log", "tail",
                                 "message")} == {
        "rank": 0, "host": "node-a", "role": "worker", "event": "start-failed", "code": 127,
        "signal": None, "cause": "self", "log": str(tmp_path / "worker_0.log"), "tail": [],
        "message": "cannot start w: No such file or directory"}


def test_an_exit_is_reported_with_the_logs_tail_secrets_masked(tmp_path, capfd):
    spec = _spec(tmp_path, ["w"], env={"MA_SECRET_KEY": "s3cr3t-value", "PLAIN": "x"})
    (tmp_path / "worker_0.log").write_text("step 1\nkey=s3cr3t-value\nTraceback: boom\n")
    sup = _sup(spec)
    child = sup.children["worker"]
    child.status, child.signal = 137, 9
    sup._report(child, cause="terminated")
    [line] = status_lines(capfd.readouterr().err)
    assert (line["role"], line["event"], line["code"], line["signal"], line["cause"]) == (
        "worker", "exit", 137, 9, "terminated")
    assert line["tail"] == ["step 1", "key=****", "Traceback: boom"] and "message" not in line
