"""A preempted training job saves its checkpoint under a plain ``mpilaunch --launcher srun``
inside a real Slurm (tests/helpers/slurm/): 2 ranks of tests/helpers/preempt_worker.py (a
DataLoader of 2 worker processes each; on SIGTERM the step ends, the checkpoint is saved, exit
0). ``scancel --batch --signal=TERM`` (what ``sbatch --signal=B:TERM@N`` sends before the time
limit) reaches mpilaunch alone: every worker's main process gets SIGTERM and the default grace,
every rank saves. Marked ``slow`` and ``slurm``."""
import os
import shlex
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")]

WORKER = os.path.join(REPO, "tests", "helpers", "preempt_worker.py")


def test_scancel_batch_term_lets_every_srun_rank_save(slurm_cluster, tmp_path):
    out = str(tmp_path)
    argv = [sys.executable, "-m", "mpilaunch", "--launcher", "srun", "--no-scheduler",
            "--master_port", "0", "--log_dir", os.path.join(out, "logs"), WORKER, out]
    script = "cd %s\nexec %s\n" % (shlex.quote(REPO), " ".join(shlex.quote(a) for a in argv))
    job, _, log = slurm_cluster.sbatch(script, ["-n2"], env=slurm_cluster.env(clean_env()),
                                       wait=False)
    try:
        assert wait_for(lambda: all(os.path.exists(os.path.join(out, f"up_{r}")) for r in (0, 1)),
                        120), open(log).read() if os.path.exists(log) else job
        assert slurm_cluster.run(["scancel", "--batch", "--signal=TERM", job]).returncode == 0
        assert slurm_cluster.wait_gone(job, 60)
    finally:
        slurm_cluster.run(["scancel", job])
    text = open(log).read()
    assert [open(os.path.join(out, f"saved_{r}")).read().isdigit() for r in (0, 1)] == [True, True], text
    assert "graceful stop: SIGTERM to every worker, up to 20 s to save" in text, text
    assert "ended within the grace: rank 0, rank 1" in text, text
    assert slurm_cluster.job_record(job)[1] == "143:0", slurm_cluster.job_record(job)
