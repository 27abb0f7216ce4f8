"""mpilaunch/supervise/usersignals.py without a launch: which way each workers' signal goes (the starter
when it forwards it, else the control channel, else a line saying it is not delivered), a
SIGTSTP from slurmstepd (and another one within 5 s of it or of the resume) not passed on, nothing passed on while no rank runs, and the SIGTSTP
thread really taking a SIGTSTP sent to this process (with its sender) while installed."""
import os
import shutil
import signal
import subprocess
import time
from types import SimpleNamespace

import pytest

from mpilaunch.supervise import usersignals
from mpilaunch.output.summary import signal_note
from helpers.procs import wait_for


class _Control:
    def __init__(self, reach):
        self.sent, self.reach = [], reach

    def signal(self, signum):
        self.sent.append(signum)
        return self.reach


def _job(running=True):
    kills = []
    return SimpleNamespace(proc=SimpleNamespace(poll=lambda: None if running else 0),
                           kill=kills.append, kills=kills)


def _forwarder(forwards, control=None, np=2, running=True):
    fw = usersignals.Forwarder(SimpleNamespace(forwards=frozenset(forwards), program="mpiexec"),
                               control)
    job = _job(running)
    fw.started(job, np)
    return fw, job


def test_the_starter_when_it_forwards_else_the_channel(capsys):
    ctl = _Control([0, 1])
    fw, job = _forwarder({signal.SIGUSR1}, ctl)
    fw.deliver(signal.SIGUSR1, None)
    fw.deliver(signal.SIGUSR2, None)
    assert job.kills == [signal.SIGUSR1] and ctl.sent == [signal.SIGUSR2]
    assert fw.delivered == [signal.SIGUSR1, signal.SIGUSR2]
    assert capsys.readouterr().err == (
        "mpilaunch: SIGUSR1 received: forwarded to every rank by mpiexec\n"
        "mpilaunch: SIGUSR2 received: sent to every rank's adapter, for its workers\n")


def test_the_ranks_the_channel_did_not_reach_are_named(capsys):
    fw, job = _forwarder((), _Control([0, 2]), np=3)
    fw.deliver(signal.SIGCONT, None)
    assert capsys.readouterr().err == (
        "mpilaunch: SIGCONT received: sent to every rank's adapter, for its workers (not "
        "reached: rank 1: not connected to the launcher's control port)\n")


def test_without_a_channel_it_says_so(capsys):
    fw, job = _forwarder({signal.SIGUSR1})
    fw.deliver(signal.SIGTSTP, None)
    assert job.kills == [] and capsys.readouterr().err == (
        "mpilaunch: SIGTSTP received: not delivered: mpiexec does not forward it, and under "
        "--exec no adapter is there to\n")


def test_nothing_while_no_rank_runs(capsys):
    fw, job = _forwarder(usersignals.SIGNALS, running=False)
    fw.deliver(signal.SIGUSR1, None)
    assert job.kills == [] and fw.delivered == []
    assert capsys.readouterr().err == "mpilaunch: SIGUSR1 received while no rank runs: not forwarded\n"


def test_slurms_sigtstp_is_not_passed_on(tmp_path, capsys):
    stepd = tmp_path / "slurmstepd"            # a process whose name is slurmstepd's
    shutil.copy("/bin/sleep", stepd)
    proc = subprocess.Popen([str(stepd), "30"])
    try:
        assert wait_for(lambda: open(f"/proc/{proc.pid}/comm").read().strip() == "slurmstepd", 5)
        fw, job = _forwarder(usersignals.SIGNALS)
        fw.deliver(signal.SIGTSTP, proc.pid)
        assert job.kills == [] and fw.delivered == []
        assert "SIGTSTP from Slurm (scontrol suspend)" in capsys.readouterr().err
        fw.deliver(signal.SIGCONT, None)            # the resume: passed on, the window renewed
        fw.deliver(signal.SIGTSTP, os.getpid())     # in the window: a copy of Slurm's
        assert job.kills == [signal.SIGCONT] and fw.delivered == [signal.SIGCONT]
        assert capsys.readouterr().err.splitlines()[-1] == (
            "mpilaunch: SIGTSTP 0.0 s after Slurm's suspend or resume: taken as Slurm's; not "
            f"forwarded (sent by pid {os.getpid()}, {open('/proc/self/comm').read().strip()})")
        fw.slurm_mark -= usersignals.SLURM_WINDOW
        fw.deliver(signal.SIGTSTP, os.getpid())     # anyone else's, later: passed on
        assert job.kills == [signal.SIGCONT, signal.SIGTSTP]
    finally:
        proc.kill()
        proc.wait()


def test_install_takes_sigtstp_with_its_sender_and_uninstall_leaves_it_unblocked(capsys):
    fw = usersignals.Forwarder(SimpleNamespace(forwards=frozenset(usersignals.SIGNALS),
                                               program="mpirun"))
    fw.install()
    try:
        assert signal.SIGTSTP in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        job = _job()
        fw.started(job, 2)
        os.kill(os.getpid(), signal.SIGTSTP)       # this process does not stop: it is taken
        assert wait_for(lambda: job.kills == [signal.SIGTSTP], 5)
        os.kill(os.getpid(), signal.SIGUSR2)       # a handler, not the default (death)
        assert wait_for(lambda: job.kills == [signal.SIGTSTP, signal.SIGUSR2], 5)
    finally:
        fw.uninstall()
    assert signal.SIGTSTP not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    os.kill(os.getpid(), signal.SIGTSTP)        # between attempts: the ended job gets nothing
    time.sleep(0.2)
    assert job.kills == [signal.SIGTSTP, signal.SIGUSR2]
    for sig in usersignals.SIGNALS:         # between attempts: kept from killing the launcher
        assert signal.getsignal(sig) is usersignals._no_ranks
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig,delivered,starter,words", [
    (signal.SIGUSR1, [signal.SIGUSR1], False, "signal: SIGUSR1 was sent to mpilaunch, which gave it to every worker"),
    (signal.SIGUSR2, [signal.SIGUSR1], False, "signal: SIGUSR2 reached the ranks without going through mpilaunch"),
    (signal.SIGUSR2, [], True, "signal: SIGUSR2 was sent to mpiexec itself, which died of it"),
    (signal.SIGKILL, [signal.SIGKILL], False, None),
    (None, [], False, None),
])
def test_the_summary_says_where_a_killing_signal_came_from(sig, delivered, starter, words):
    note = signal_note(sig, delivered, "mpiexec", starter=starter)
    assert (note is None) if words is None else note.startswith("  " + words)
