"""mpilaunch/rank/watchdog.py: where the heartbeat and the stacks go, finding py-spy, the stack
dump, and the watchdog thread's verdicts (stall, progress, done) as exact status lines.

The thread runs here with timeouts of a fraction of a second; its status lines go to fd 2,
read back with capfd. The only processes started are fake py-spy scripts."""
import os
import signal
import sys
import time

import pytest

from helpers.adapter import status_lines
from mpilaunch.rank import pyspy, watchdog

NO_PY_SPY = "no stacks: py-spy is not installed here (pip install 'mpilaunch[stall]', or pip install py-spy)"


def _unused_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _executable(path, text="#!/bin/sh\nexit 0\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def no_py_spy_beside_python(tmp_path, monkeypatch):
    """An interpreter path whose directory holds no py-spy (the test extras install one)."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    return tmp_path / "venv" / "bin"


# --------------------------------------------------------------------------- paths, py-spy

def test_heartbeat_and_stacks_live_in_the_log_dir(tmp_path, monkeypatch):
    assert watchdog.heartbeat_path(str(tmp_path), 3) == str(tmp_path / "heartbeat_3")
    assert watchdog.stacks_path(str(tmp_path), 3) == str(tmp_path / "stacks_3.txt")
    monkeypatch.chdir(tmp_path)
    assert watchdog.heartbeat_path("logs", 0) == str(tmp_path / "logs" / "heartbeat_0")
    assert watchdog.HEARTBEAT_VAR == "MPILAUNCH_HEARTBEAT_FILE"


def test_find_py_spy_takes_the_first_executable_on_the_workers_path(tmp_path, no_py_spy_beside_python):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "py-spy").write_text("not executable\n")
    found = _executable(tmp_path / "b" / "py-spy")
    _executable(tmp_path / "c" / "py-spy")
    path = os.pathsep.join(str(tmp_path / d) for d in ("missing", "a", "b", "c"))
    assert pyspy.find(path) == found
    assert pyspy.find(str(tmp_path / "missing")) == ""


def test_find_py_spy_prefers_the_one_beside_the_interpreter(tmp_path, no_py_spy_beside_python):
    beside = _executable(no_py_spy_beside_python / "py-spy")
    _executable(tmp_path / "b" / "py-spy")
    assert pyspy.find(str(tmp_path / "b")) == beside


def test_dump_without_py_spy_says_so_in_the_stacks_file(tmp_path):
    out = tmp_path / "stacks_0.txt"
    assert watchdog.dump_stacks(123, str(out), "") == NO_PY_SPY
    assert out.read_text() == NO_PY_SPY + "\n"


def test_dump_writes_what_py_spy_printed_for_the_pid(tmp_path):
    fake = _executable(tmp_path / "py-spy", '#!/bin/sh\necho "args $*"\necho "warning" >&2\nexit 3\n')
    pid = _unused_pid()                     # no process: no children to dump as well
    out = tmp_path / "stacks_1.txt"
    assert watchdog.dump_stacks(pid, str(out), fake) == f"stacks: {out}"
    assert out.read_text() == f"== py-spy dump --pid {pid} (exit 3)\nargs dump --pid {pid}\nwarning\n"


def test_dump_with_a_py_spy_that_cannot_run_names_the_error(tmp_path):
    pid = _unused_pid()
    out = tmp_path / "stacks_1.txt"
    missing = str(tmp_path / "gone" / "py-spy")
    assert watchdog.dump_stacks(pid, str(out), missing) == f"stacks: {out}"
    assert out.read_text() == (f"== py-spy dump --pid {pid}: [Errno 2] No such file or directory: "
                               f"'{missing}'\n")


# --------------------------------------------------------------------------- the thread

class Worker:
    """What the watchdog is told about the worker: its pid and its exit status."""

    def __init__(self, pid=None):
        self.pid, self.status = pid, None


def _dog(tmp_path, worker, timeout=0.4, py_spy=""):
    log = tmp_path / "worker_2.log"
    log.touch()
    dog = watchdog.Watchdog(timeout, str(log), str(tmp_path / "heartbeat_2"),
                            str(tmp_path / "stacks_2.txt"), lambda: worker.pid, 2, "node-a", py_spy,
                            status_of=lambda: worker.status)
    dog.start()
    return dog, str(log)


class Lines:
    """The status lines read so far from fd 2."""

    def __init__(self, capfd):
        self.capfd, self.seen = capfd, []

    def wait(self, n, timeout=10.0):
        end = time.monotonic() + timeout
        while len(self.seen) < n and time.monotonic() < end:
            self.seen += status_lines(self.capfd.readouterr().err)
            time.sleep(0.02)
        return [(s["role"], s["event"], s["code"], s["signal"], s["cause"]) for s in self.seen]


def test_silence_is_a_stall_progress_after_it_is_said_and_a_success_ends_the_watch(tmp_path, capfd):
    worker = Worker()
    dog, log = _dog(tmp_path, worker)
    lines = Lines(capfd)
    assert lines.wait(1) == [("worker", "stall", None, None, "stall")]
    stall = lines.seen[0]
    assert (stall["rank"], stall["host"], stall["log"], stall["tail"]) == (2, "node-a", log, [])
    assert stall["message"].startswith("no progress for ")
    assert stall["message"].endswith(" s; the worker has not started")
    assert not (tmp_path / "stacks_2.txt").exists()          # no pid: nothing to dump
    (tmp_path / "heartbeat_2").write_text("")                # the worker touched its heartbeat
    assert lines.wait(2)[1] == ("worker", "progress", None, None, "stall")
    worker.status = 0
    dog.join(5)
    assert not dog.is_alive()
    assert lines.wait(3) == [("worker", "stall", None, None, "stall"),
                             ("worker", "progress", None, None, "stall"),
                             ("worker", "done", 0, None, "stall")]


def test_a_stall_dumps_the_stacks_of_a_started_worker(tmp_path, capfd):
    dog, _ = _dog(tmp_path, Worker(pid=_unused_pid()))
    lines = Lines(capfd)
    assert lines.wait(1) == [("worker", "stall", None, None, "stall")]
    assert lines.seen[0]["message"].endswith(" s; " + NO_PY_SPY)
    assert (tmp_path / "stacks_2.txt").read_text() == NO_PY_SPY + "\n"
    dog.done.set()
    dog.join(5)
    assert not dog.is_alive() and lines.wait(2, timeout=0.3) == [("worker", "stall", None, None, "stall")]


def test_steady_output_is_never_a_stall(tmp_path, capfd):
    dog, log = _dog(tmp_path, Worker(pid=1), timeout=0.4)
    end = time.monotonic() + 1.5
    with open(log, "a") as f:
        while time.monotonic() < end:
            f.write("step\n")
            f.flush()
            time.sleep(0.05)
    dog.done.set()
    dog.join(5)
    assert not dog.is_alive()
    assert status_lines(capfd.readouterr().err) == []


def test_a_failed_worker_ends_the_watch_without_a_line(tmp_path, capfd):
    worker = Worker(pid=1)
    worker.status = 1
    dog, _ = _dog(tmp_path, worker)
    dog.join(5)
    assert not dog.is_alive()
    assert status_lines(capfd.readouterr().err) == []


def _blocked(tid):
    with open(f"/proc/self/task/{tid}/status") as f:
        mask = int(next(line for line in f if line.startswith("SigBlk:")).split()[1], 16)
    return {s for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)
            if mask & (1 << (s - 1))}


def test_the_thread_blocks_the_signals_the_main_thread_must_get(tmp_path):
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    dog, _ = _dog(tmp_path, Worker(), timeout=60)
    try:
        assert _blocked(dog.native_id) == {signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD}
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before
    finally:
        dog.done.set()
        dog.join(5)
