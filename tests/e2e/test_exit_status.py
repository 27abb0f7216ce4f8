"""The same failing job under every way of starting ranks: Open MPI 5 and 4.1's mpirun, MPICH's
and Intel MPI's mpiexec, and Slurm's srun end with the same status and name the same root
cause (mpilaunch/output/outcome.py). Rank 1 exits 5 while rank 0 is still running, so each starter
tears rank 0 down and reports a number of its own (srun: rank 0's 143)."""
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from helpers.launch import clean_env
from helpers.mpis import ALL, mpilaunch_argv

WORKER = """\
import os, sys, time
if os.environ["RANK"] == "1":
    time.sleep(0.5)
    print("rank 1 gives up", flush=True)
    sys.exit(5)
time.sleep(60)
"""


def _check(p, took, log_dir):
    err = p.stderr
    assert "Traceback" not in err, err
    assert p.returncode == 5, err
    assert re.search(r"root cause: rank 1 \(worker\) on host \S+: exit code 5", err), err
    assert f"log: {os.path.join(log_dir, 'worker_1.log')}" in err, err
    assert "| rank 1 gives up" in err, err
    assert "job failed (exit status 5)" in err, err
    assert took < 30, f"rank 0 (sleeping 60 s) was not torn down: {took:.1f} s"


@pytest.mark.parametrize("mpi", ALL)
def test_same_status_and_summary_under_each_mpi(tmp_path, mpi):
    (tmp_path / "f.py").write_text(WORKER)
    log_dir = str(tmp_path / "logs")
    t0 = time.monotonic()
    p = subprocess.run(mpilaunch_argv(mpi, "-np", "2", "--no-scheduler", "--master_port", "0",
                                      "--log_dir", log_dir, "f.py"),
                       cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=90,
                       stdin=subprocess.DEVNULL)
    _check(p, time.monotonic() - t0, log_dir)


@pytest.mark.slurm
def test_same_status_and_summary_under_srun(slurm_cluster, tmp_path):
    """``--launcher srun``: srun itself exits with the torn-down rank 0's 143; the job's status
    is still rank 1's 5, as the summary says."""
    (tmp_path / "f.py").write_text(WORKER)
    log_dir = str(tmp_path / "logs")
    t0 = time.monotonic()
    p = slurm_cluster.run(["salloc", "-n2", sys.executable, "-m", "mpilaunch", "--launcher", "srun",
                           "--no-scheduler", "--master_port", "0", "--log_dir", log_dir, "f.py"],
                          timeout=120, cwd=tmp_path, env=slurm_cluster.env(clean_env()))
    _check(p, time.monotonic() - t0, log_dir)


@pytest.mark.slurm
def test_srun_refuses_an_mpirun_option_in_one_line(slurm_cluster, tmp_path):
    """An mpirun option srun has no meaning for: one line, exit 2, nothing started, no run dir
    left behind (it used to be a traceback: the run dir, holding its owner file, was removed
    with os.rmdir)."""
    (tmp_path / "f.py").write_text(WORKER)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = slurm_cluster.env(clean_env(TMPDIR=str(tmpdir)))
    p = slurm_cluster.run(["salloc", "-n2", sys.executable, "-m", "mpilaunch", "--launcher", "srun",
                           "--master_port", "0", "--extra-args", "--hostfile x", "f.py"], timeout=120,
                          cwd=tmp_path, env=env)
    err = p.stderr
    assert p.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("mpilaunch")]
    assert lines == ["mpilaunch: error: --extra-args: mpirun option '--hostfile' has no meaning "
                     "under --launcher srun; remove it or use --launcher mpirun"], err
    assert "Traceback" not in err
    assert [n for n in os.listdir(tmpdir) if n.startswith("mpilaunch")] == [], os.listdir(tmpdir)
    assert not (tmp_path / "worker_0.log").exists()
