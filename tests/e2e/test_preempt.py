"""A preempted training job saves its checkpoint under a plain ``mpilaunch`` (no option): 2
ranks of tests/helpers/preempt_worker.py, each with a DataLoader of 2 worker processes, that on
SIGTERM finish their step, save and exit 0. SIGTERM to mpilaunch gives every worker's main
process SIGTERM (its DataLoader's workers keep serving until it exits) and the default grace;
every rank saves, the job ends 143 and the summary names who ended within the grace. Open MPI
5 and 4.1, MPICH's and Intel MPI's mpiexec (this interpreter, which has torch, runs launcher
and ranks); ``--term-grace 0`` is the starter's immediate stop, as before the default."""
import os
import signal
import subprocess
import sys

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import IMPI, MPICH, OMPI4, OMPI5
from helpers.procs import wait_for
from helpers.sigworker import channel_peers

WORKER = os.path.join(REPO, "tests", "helpers", "preempt_worker.py")

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def preempt(mpirun, tmp_path, *args):
    """Start the job, SIGTERM to mpilaunch once both ranks' DataLoaders serve and both
    adapters are on the control channel -> (status, stderr, out dir, processes left)."""
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "2", "--no-scheduler",
         "--master_port", "0", "--log_dir", str(tmp_path / "logs"), *args, WORKER, str(out)],
        env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(2))
                        or proc.poll() is not None, 120)
        assert proc.poll() is None, proc.communicate()[1]
        assert wait_for(lambda: channel_peers(proc.pid) == 2, 30)
        kids = psutil.Process(proc.pid).children(recursive=True)
        loaders = [k for k in kids if k.parent() is not None
                   and WORKER in " ".join(k.parent().cmdline())]
        assert len(loaders) >= 4, [k.cmdline() for k in kids]   # 2 DataLoader workers a rank
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)      # the 20 s grace and the teardown, loaded
    finally:
        if proc.poll() is None:
            proc.kill()
    left = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    return proc.returncode, err, out, left


@pytest.mark.parametrize("mpi", [pytest.param(m, id=m.id, marks=pytest.mark.skipif(
    not os.access(m.mpirun, os.X_OK), reason=f"{m.id} not installed")) for m in (OMPI5, OMPI4, MPICH, IMPI)])
def test_sigterm_to_a_plain_mpilaunch_lets_every_rank_save(mpi, tmp_path):
    rc, err, out, left = preempt(mpi.mpirun, tmp_path)
    assert rc == 143, err
    assert [(out / f"ckpt_{r}.pt").exists() and (out / f"saved_{r}").exists()
            for r in range(2)] == [True, True], err
    assert "SIGTERM received: SIGTERM to every worker, 20 s to save" in err
    assert "graceful stop: SIGTERM to every worker, up to 20 s to save" in err
    assert "ended within the grace: rank 0, rank 1" in err
    assert "failed on its own" not in err     # a rank that saved is no failure
    assert left == []


def test_term_grace_0_is_the_starters_immediate_stop(tmp_path):
    rc, err, out, left = preempt(OMPI5.mpirun, tmp_path, "--term-grace", "0")
    assert rc == 143, err
    assert not any((out / f"saved_{r}").exists() for r in range(2)), err
    assert "graceful stop" not in err
    # the starter's stop SIGKILLs the rank's main process: its DataLoader's workers, orphaned,
    # see their parent gone at their next check (torch's watchdog, every 5 s) and exit
    assert wait_for(lambda: not any(k.is_running() and k.status() != psutil.STATUS_ZOMBIE
                                    for k in left), 60), left
