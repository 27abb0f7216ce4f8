"""mpilaunch inside a real Slurm job (tests/helpers/slurm/: munged + slurmctld + slurmd on this
machine, one node with 4 task slots): ``sbatch --wait`` of a script that calls mpilaunch with
no hostfile, through mpirun (Open MPI 5 wheel, Open MPI 4.1 Debian) and through
``--launcher srun``; a failing worker; ``scancel`` mid-run.

Slow (each job starts a real allocation): marked ``slow`` and ``slurm``."""
import json
import os
import shlex
import sys
import time

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS
from helpers.slurm.jobs import EXACT, WORKER, read_ranks

pytestmark = [pytest.mark.slow, pytest.mark.slurm]


def _script(out, *launch_args, mode="ok"):
    argv = [sys.executable, "-m", "mpilaunch", "--no-scheduler", "--log_dir", out,
            "--master_port", "0", *launch_args, WORKER]
    return ("cd %s\nexport OUT=%s MODE=%s\nexec %s\n" % (
        shlex.quote(REPO), shlex.quote(out), mode, " ".join(shlex.quote(a) for a in argv)))


def _env(cluster, **extra):
    return cluster.env(clean_env(**EXACT, **extra))


def _check_ranks(ranks, job):
    assert [r["RANK"] for r in ranks] == ["0", "1"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"2"}
    assert sorted(r["LOCAL_RANK"] for r in ranks) == ["0", "1"]
    assert {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"2"}
    assert {r["GROUP_RANK"] for r in ranks} == {"0"} and {r["NODE_RANK"] for r in ranks} == {"0"}
    assert {r["MASTER_ADDR"] for r in ranks} == {"127.0.0.1"}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert ranks[0]["peers"] == [1]                      # rank 1 met rank 0 there
    assert {r["SLURM_JOB_ID"] for r in ranks} == {job}
    for r in ranks:
        for k, v in EXACT.items():
            assert r["MA_"][k] == v, k


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_sbatch_mpirun_takes_the_allocation(slurm_cluster, tmp_path, mpirun):
    out = str(tmp_path)
    job, rc, log = slurm_cluster.sbatch(_script(out, "--mpirun", mpirun, "-v"), ["-n2"],
                                        env=_env(slurm_cluster))
    text = open(log).read()
    assert rc == 0, text
    _check_ranks(read_ranks(out, 2), job)
    assert "s3cr3t" not in text
    assert slurm_cluster.job_record(job) == ("COMPLETED", "0:0")


def test_sbatch_launcher_srun(slurm_cluster, tmp_path):
    out = str(tmp_path)
    job, rc, log = slurm_cluster.sbatch(_script(out, "--launcher", "srun", "-v"), ["-n2"],
                                        env=_env(slurm_cluster))
    text = open(log).read()
    assert rc == 0, text
    assert "srun --mpi=pmix --kill-on-bad-exit=1 --ntasks=2 --export=ALL" in text
    ranks = read_ranks(out, 2)
    _check_ranks(ranks, job)
    assert {r["OMPI_MCA_pml"] for r in ranks} == {"ob1"}    # OPENMPI_MCA_ARGS' default
    assert "s3cr3t" not in text
    assert slurm_cluster.job_record(job) == ("COMPLETED", "0:0")


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_failing_worker_fails_the_job_with_its_code(slurm_cluster, tmp_path, launcher):
    out = str(tmp_path)
    job, rc, log = slurm_cluster.sbatch(_script(out, "--launcher", launcher, mode="fail"),
                                        ["-n2"], env=_env(slurm_cluster))
    text = open(log).read()
    assert rc == 3, text
    assert slurm_cluster.job_record(job) == ("FAILED", "3:0")
    assert slurm_cluster.jobcomp(job).get("JobState") == "FAILED"
    assert "rank 1" in text and "exit code 3" in text, text
    assert slurm_cluster.job_pids() == [] or _gone(slurm_cluster)


def _gone(cluster, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not cluster.job_pids():
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_scancel_mid_run(slurm_cluster, tmp_path, launcher):
    """scancel: Slurm sends SIGTERM to every process of the job (KillWait=5 s before SIGKILL);
    the workers save, nothing is left, and mpilaunch names the cause."""
    out = str(tmp_path)
    job, _, log = slurm_cluster.sbatch(_script(out, "--launcher", launcher, mode="hang"),
                                       ["-n2"], env=_env(slurm_cluster), wait=False)
    deadline = time.monotonic() + 90
    while not all(os.path.exists(os.path.join(out, "started-%d" % r)) for r in (0, 1)):
        assert time.monotonic() < deadline, open(log).read() if os.path.exists(log) else job
        time.sleep(0.2)
    t0 = time.monotonic()
    assert slurm_cluster.run(["scancel", job]).returncode == 0
    assert slurm_cluster.wait_gone(job, 30)
    took = time.monotonic() - t0
    assert _gone(slurm_cluster), slurm_cluster.job_pids()
    for r in (0, 1):
        assert open(os.path.join(out, "saved-%d" % r)).read() == "15"
    text = open(log).read()
    assert slurm_cluster.job_record(job)[0] == "CANCELLED"
    assert "  scheduler: Slurm job %s: cancelled by the scheduler (scancel)" % job in text, text
    assert took < 15, took
    assert slurm_cluster.zombies() == []    # reaper.py collected every ended slurmstepd
