"""mpilaunch/procstat.py, the one reader of /proc/PID/stat, against real processes: a running
one, a zombie, a stopped one, one whose command name holds ``) `` (the fields are read after the
last parenthesis), and a pid nobody has."""
import os
import signal
import subprocess
import sys

from mpilaunch import procstat


def _unused_pid():
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid -= 1
    return pid


def _wait_state(pid, want):
    while procstat.state(pid) != want:   # the kernel sets it at once; a loaded machine is slow
        os.sched_yield()


def test_a_running_process():
    me = os.getpid()
    assert procstat.running(me) and procstat.state(me) in (b"R", b"S")
    assert procstat.parent(me) == os.getppid()
    start = procstat.start_time(me)
    assert isinstance(start, int) and start == procstat.start_time(me)


def test_a_zombie_has_ended_and_a_missing_pid_is_none():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    _wait_state(child.pid, b"Z")
    assert not procstat.running(child.pid)
    assert procstat.start_time(child.pid) is None
    assert procstat.parent(child.pid) == os.getpid()
    child.wait()
    gone = _unused_pid()
    assert (procstat.fields(gone), procstat.state(gone), procstat.parent(gone),
            procstat.start_time(gone), procstat.running(gone)) == (None, None, None, None, False)
    assert procstat.state(None) is None


def test_a_stopped_process_and_a_name_with_a_parenthesis(tmp_path):
    odd = tmp_path / "a) b c"
    odd.symlink_to(sys.executable)
    child = subprocess.Popen([str(odd), "-c", "import time; print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "up\n"     # exec'd: the name is the link's
        with open(f"/proc/{child.pid}/stat", "rb") as fh:
            assert b"(a) b c)" in fh.read()
        assert procstat.parent(child.pid) == os.getpid()
        os.kill(child.pid, signal.SIGSTOP)
        _wait_state(child.pid, b"T")
        assert procstat.state(child.pid) in procstat.STOPPED and procstat.running(child.pid)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
