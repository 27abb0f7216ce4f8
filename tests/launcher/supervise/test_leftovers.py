"""mpilaunch/supervise/leftovers.py: the processes started with the attempt's key in their
environment, and only those, are ended; one that ignores SIGTERM gets SIGKILL."""
import os
import signal
import subprocess
import sys

from mpilaunch.supervise import leftovers

IGNORE_TERM = ("import signal, sys, time\n"
               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "print('ready', flush=True)\n"
               "time.sleep(60)\n")


def _start(mark, code="import time; print('ready', flush=True); time.sleep(60)"):
    env = dict(os.environ, MPILAUNCH_TEST_MARK=mark)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"     # its handlers are in place
    return proc


def test_only_the_marked_processes_are_ended():
    ours, other = _start("attempt-a"), _start("attempt-b")
    try:
        assert leftovers.marked("MPILAUNCH_TEST_MARK", "attempt-a") == [ours.pid]
        found, stuck = leftovers.end("MPILAUNCH_TEST_MARK", "attempt-a")
        assert (found, stuck) == ([ours.pid], [])
        assert ours.wait(10) == -signal.SIGTERM
        assert other.poll() is None
        assert leftovers.end("MPILAUNCH_TEST_MARK", "attempt-a") == ([], [])   # nothing left
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace():
    proc = _start("attempt-c", IGNORE_TERM)
    try:
        found, stuck = leftovers.end("MPILAUNCH_TEST_MARK", "attempt-c", grace=0.2)
        assert (found, stuck) == ([proc.pid], [])
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_a_value_that_only_starts_the_same_does_not_match():
    proc = _start("attempt-dd")
    try:
        assert leftovers.marked("MPILAUNCH_TEST_MARK", "attempt-d") == []
    finally:
        proc.kill()
        proc.wait()
