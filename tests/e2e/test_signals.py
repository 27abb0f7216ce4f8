"""Signals keep a bare launcher's contract (docs/SIGNALS.md), on Open MPI 5 and 4.1, MPICH and
Intel MPI, 2 ranks on this machine, each worker tests/helpers/sigworker.py: SIGUSR1 and SIGUSR2
to the launcher or to the starter reach every worker once, a worker with a handler goes on and
the job ends 0, one without dies of it (128+N, the summary saying where the signal came from);
SIGTSTP/SIGCONT to the launcher stop and resume every worker, and a paused job is not stalled;
--term-grace still stops gracefully, over the launcher's own channel. Every signal is sent once
both workers are up; what each worker's handler wrote is counted."""
import signal
import subprocess
import time

import psutil
import pytest

from helpers import REPO
from helpers import sigworker
from helpers.launch import clean_env
from helpers.mpis import ALL, HYDRA, mpilaunch_argv
from helpers.procs import alive, wait_for

pytestmark = pytest.mark.slow


def _start(mpi, tmp_path, mode, steps, *args):
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        mpilaunch_argv(mpi, "-np", "2", "--no-scheduler", "--master_port", "0", "--log_dir",
                       str(tmp_path / "logs"), *args, sigworker.PATH, str(out), mode, str(steps)),
        env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    # a signal that goes over the control channel (one Hydra's starter does not forward, or
    # --term-grace's stop) reaches the adapters answered by then: a worker's handler may be in
    # place before its adapter's connection is
    channel = mpi.hydra or "--term-grace" in args

    def ready():
        return sigworker.all_exist(out, "up", 2) and (
            not channel or sigworker.channel_peers(proc.pid) == 2)

    if not wait_for(lambda: proc.poll() is not None or ready(), 60) or proc.poll() is not None:
        proc.kill()
        pytest.fail("the workers or their adapters did not come up: " + proc.communicate()[1])
    return proc, out, psutil.Process(proc.pid).children(recursive=True)


def _workers(kids):
    return [k for k in kids if sigworker.PATH in " ".join(k.cmdline()) and "_boot.py" not in " ".join(k.cmdline())]


def _finish(proc, kids, timeout=60):
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err, alive(kids)


@pytest.mark.parametrize("mpi", ALL)
def test_user_signals_reach_every_worker_once_and_the_job_goes_on(mpi, tmp_path):
    """In one job: SIGUSR1 and SIGUSR2 to the launcher, SIGUSR1 to the starter (and SIGUSR2 on
    Open MPI: Hydra's mpiexec dies of it, see below), then SIGTSTP to the launcher: every worker
    stops (state T) and takes no step for 3 s, longer than --stall-timeout 2; SIGCONT resumes
    them all. The job then ends as it would have: exit 0, not called stalled, later by the
    pause."""
    proc, out, kids = _start(mpi, tmp_path, "handle", 40, "--stall-timeout", "2")
    t0 = time.monotonic()
    starter = psutil.Process(proc.pid).children()[0]
    sent = {"SIGUSR1": 0, "SIGUSR2": 0}
    steps = [("launcher", signal.SIGUSR1), ("launcher", signal.SIGUSR2), ("starter", signal.SIGUSR1)]
    if not mpi.hydra:
        steps.append(("starter", signal.SIGUSR2))
    for to, sig in steps:
        (proc if to == "launcher" else starter).send_signal(sig)
        sent[sig.name] += 1
        want = sent[sig.name]
        assert wait_for(lambda: sigworker.counts(out, sig.name, 2) == [want, want], 10), (to, sig)
        time.sleep(0.3)   # a second copy, if one were on its way, would arrive by now
        assert sigworker.counts(out, sig.name, 2) == [want, want], (to, sig)
    proc.send_signal(signal.SIGTSTP)
    workers = _workers(kids)
    assert len(workers) == 2
    assert wait_for(lambda: all(w.status() == psutil.STATUS_STOPPED for w in workers), 10)
    before = [sigworker.steps(out, r) for r in range(2)]
    time.sleep(3)
    assert [sigworker.steps(out, r) for r in range(2)] == before     # no step while stopped
    assert proc.poll() is None
    proc.send_signal(signal.SIGCONT)
    assert wait_for(lambda: sigworker.counts(out, "SIGCONT", 2) == [1, 1], 10)
    rc, err, left = _finish(proc, kids)
    took = time.monotonic() - t0
    assert rc == 0, err
    assert sigworker.all_exist(out, "done", 2)
    assert sigworker.counts(out, "SIGUSR1", 2) == [2, 2] and sigworker.counts(out, "SIGCONT", 2) == [1, 1]
    assert took >= 3 + 2, took          # 4 s of steps, 3 s of them after the signals, + the pause
    assert "stalled" not in err
    assert "mpilaunch: SIGTSTP received: " in err and "mpilaunch: SIGCONT received: " in err
    assert left == []


@pytest.mark.parametrize("to", ["launcher", "starter"])
@pytest.mark.parametrize("mpi", ALL)
def test_a_worker_without_a_handler_dies_of_it_and_the_summary_says_whence(mpi, to, tmp_path):
    proc, out, kids = _start(mpi, tmp_path, "default", 0)
    target = proc if to == "launcher" else psutil.Process(proc.pid).children()[0]
    target.send_signal(signal.SIGUSR1)
    rc, err, left = _finish(proc, kids, timeout=30)
    assert rc == 128 + signal.SIGUSR1, err
    assert "killed by signal 10 (SIGUSR1)" in err, err
    if to == "launcher":
        assert "signal: SIGUSR1 was sent to mpilaunch, which gave it to every worker" in err
    else:
        assert "signal: SIGUSR1 reached the ranks without going through mpilaunch" in err
    assert left == []


@pytest.mark.parametrize("mpi", HYDRA)
def test_sigusr2_to_hydras_mpiexec_ends_the_job_as_without_mpilaunch(mpi, tmp_path):
    """Hydra's mpiexec does not forward SIGUSR2: it dies of it (bare mpiexec too, and takes its
    ranks with it). mpilaunch ends the job as that does, and says to send it to mpilaunch."""
    proc, out, kids = _start(mpi, tmp_path, "handle", 0)
    psutil.Process(proc.pid).children()[0].send_signal(signal.SIGUSR2)
    rc, err, left = _finish(proc, kids, timeout=30)
    assert rc == 128 + signal.SIGUSR2, err
    assert "root cause: mpiexec itself was killed by signal 12 (SIGUSR2)" in err
    assert "signal: SIGUSR2 was sent to mpiexec itself, which died of it" in err
    assert sigworker.counts(out, "SIGUSR2", 2) == [0, 0]
    assert left == []


@pytest.mark.parametrize("mpi", ALL)
def test_term_grace_and_a_users_sigusr1_together(mpi, tmp_path):
    """--term-grace over the launcher's channel (new on Hydra): a SIGUSR1 to the launcher, then
    one to the starter, is the workers' (handlers run once each, nothing stops); the SIGTERM
    after them gives every worker SIGTERM and the grace, and each 2 s save completes."""
    proc, out, kids = _start(mpi, tmp_path, "save", 0, "--term-grace", "8")
    proc.send_signal(signal.SIGUSR1)
    assert wait_for(lambda: sigworker.counts(out, "SIGUSR1", 2) == [1, 1], 10)
    psutil.Process(proc.pid).children()[0].send_signal(signal.SIGUSR1)
    assert wait_for(lambda: sigworker.counts(out, "SIGUSR1", 2) == [2, 2], 10)
    time.sleep(0.5)
    assert not any((out / f"saving_{r}").exists() for r in range(2))
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rc, err, left = _finish(proc, kids, timeout=40)
    took = time.monotonic() - t0
    assert rc == 143, err
    assert sigworker.all_exist(out, "saved", 2), err
    assert 2 <= took < 8, took
    assert "ended within the grace: rank 0, rank 1" in err, err
    assert sigworker.counts(out, "SIGUSR1", 2) == [2, 2]
    assert left == []
