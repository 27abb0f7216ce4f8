"""Graceful stop: SIGTERM to the launcher with --term-grace gives every worker SIGTERM and up
to the grace to save before SIGKILL (asked over the launcher's control channel); a user's
SIGUSR1 is the workers' as without --term-grace; real mpirun (5 and 4.1)."""
import os
import signal
import subprocess
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.procs import wait_for
from helpers.sigworker import channel_peers

# On SIGTERM: write "<out>/saving_<rank>", take SAVE seconds, then "<out>/saved_<rank>".
# On SIGUSR1: append a line to "<out>/usr1_<rank>" and go on.
SAVER = r'''
import os, signal, sys, time
out, save = sys.argv[1], float(sys.argv[2])
rank = os.environ["RANK"]
def on_usr1(signum, frame):
    with open(os.path.join(out, f"usr1_{rank}"), "a") as f:
        f.write("1\n")
signal.signal(signal.SIGUSR1, on_usr1)
def on_term(signum, frame):
    open(os.path.join(out, f"saving_{rank}"), "w").close()
    time.sleep(save)
    open(os.path.join(out, f"saved_{rank}"), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(out, f"up_{rank}"), "w").close()
while True:
    time.sleep(0.05)
'''


def _stop(mpirun, tmp_path, grace, save, np=2, to_mpirun=None, to_rank=None):
    """SIGTERM to the launcher; or, with ``to_mpirun``, SIGUSR1 to mpirun (the launcher's
    child) from outside, as another process would send it, and SIGTERM to the launcher once
    every worker's handler has run; or, with ``to_rank`` (rank, signal), that signal to that
    rank's adapter alone. Once every worker is up and every adapter is on the launcher's
    control channel (the graceful stop goes over it)."""
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        mpilaunch_argv("--mpirun", mpirun, "-np", str(np), "--no-scheduler", "--master_port", "0",
                       "--term-grace", str(grace), "--log_dir", str(tmp_path / "logs"), str(script),
                       str(out), str(save)),
        env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(np)), 60)
        assert wait_for(lambda: channel_peers(proc.pid) == np, 30), channel_peers(proc.pid)
        kids = psutil.Process(proc.pid).children(recursive=True)
        t0 = time.monotonic()
        if to_rank is not None:
            rank, sig = to_rank
            adapter, = [k for k in kids if "_boot.py" in " ".join(k.cmdline())
                        and k.environ().get("OMPI_COMM_WORLD_RANK") == str(rank)]
            adapter.send_signal(sig)
        elif to_mpirun is None:
            proc.send_signal(signal.SIGTERM)
        else:
            mpirun_proc, = psutil.Process(proc.pid).children()
            mpirun_proc.send_signal(to_mpirun)
            assert wait_for(lambda: all((out / f"usr1_{r}").exists() for r in range(np)), 10)
            proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=grace + 30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    left = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    return proc.returncode, err, out, took, left


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_sigterm_lets_every_rank_save(mpirun, tmp_path):
    rc, err, out, took, left = _stop(mpirun, tmp_path, grace=10, save=3)
    assert rc == 143, err
    assert all((out / f"saved_{r}").exists() for r in range(2)), err
    assert 3 <= took < 10 + 8, took          # waited for the saves, not for the whole grace
    assert "graceful stop: SIGTERM to every worker, up to 10 s to save" in err
    assert "ended within the grace: rank 0, rank 1" in err
    assert left == []


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_grace_shorter_than_the_save_cuts_it_and_says_so(mpirun, tmp_path):
    rc, err, out, took, left = _stop(mpirun, tmp_path, grace=1, save=6)
    assert rc == 143, err
    assert all((out / f"saving_{r}").exists() for r in range(2))
    assert not any((out / f"saved_{r}").exists() for r in range(2))
    assert "save cut: rank 0, rank 1 still running after the 1 s grace" in err
    assert left == []


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_sigusr1_under_term_grace_is_the_workers(mpirun, tmp_path):
    """SIGUSR1 to mpirun by another process: the workers' handlers run once each and the job
    goes on (the graceful stop has its own channel; this was a stop, and exit 138, when the
    stop rode on SIGUSR1); the SIGTERM to the launcher after them still gives every worker its
    grace."""
    rc, err, out, took, left = _stop(mpirun, tmp_path, grace=10, save=1, to_mpirun=signal.SIGUSR1)
    assert rc == 143, err
    assert [(out / f"usr1_{r}").read_text() for r in range(2)] == ["1\n", "1\n"], err
    assert all((out / f"saved_{r}").exists() for r in range(2)), err
    assert "graceful stop: SIGTERM to every worker, up to 10 s to save" in err
    assert "ended within the grace: rank 0, rank 1" in err
    assert "did not send" not in err
    assert left == []


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_sigterm_to_one_rank_stops_every_rank_gracefully(mpirun, tmp_path):
    """Only rank 1's adapter gets SIGTERM (another process's): its worker saves and stops; the
    job cannot finish without it, so the launcher gives every rank the same graceful stop
    (rank 0 looped forever before), and the job's status is 128+SIGTERM, as it would be
    without --term-grace."""
    rc, err, out, took, left = _stop(mpirun, tmp_path, grace=10, save=1,
                                     to_rank=(1, signal.SIGTERM))
    assert rc == 128 + signal.SIGTERM, err
    assert all((out / f"saved_{r}").exists() for r in range(2)), err
    assert "rank 1 stopped its worker on a SIGTERM mpilaunch did not send" in err
    assert "root cause: SIGTERM reached the ranks, but mpilaunch did not send it" in err
    assert "ended within the grace: rank 0, rank 1" in err
    assert left == []
