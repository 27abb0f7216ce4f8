"""Slurm-aware Lightning under ``mpilaunch --launcher srun`` (docs/FROM_TORCHRUN.md): a Trainer
given ``SLURMEnvironment(auto_requeue=True)`` as its plugin takes its ranks from Slurm (each srun
task's own SLURM_PROCID) instead of the TorchElasticEnvironment it would pick by itself, and on
the requeue signal (SIGUSR1, what ``sbatch --signal=USR1@N`` sends to the job's steps) saves its
HPC checkpoint and requeues the job (the second run resumes from that checkpoint: seen by hand,
not waited for here: Slurm holds a requeued job ~2 min). In the test Slurm
(tests/helpers/slurm/), real Lightning. Marked ``slow`` and ``slurm``."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.procs import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import lightning"], capture_output=True).returncode != 0,
    reason="lightning not installed")]

SCRIPT = os.path.join(REPO, "tests", "helpers", "lightning_requeue.py")


def test_lightning_auto_requeue_under_launcher_srun(slurm_cluster, tmp_path):
    out = str(tmp_path)
    argv = [sys.executable, "-m", "mpilaunch", "--launcher", "srun", "--no-scheduler",
            "--master_port", "0", "--log_dir", os.path.join(out, "logs"), SCRIPT, out]
    script = "cd %s\nexec %s\n" % (shlex.quote(REPO), " ".join(shlex.quote(a) for a in argv))
    # the requeued run appends to the same output (both runs' lines, if it fails)
    job, _, log = slurm_cluster.sbatch(script, ["-N1", "--ntasks-per-node=2", "--open-mode=append"],
                                       env=slurm_cluster.env(clean_env()), wait=False)

    def text():
        logs = os.path.join(out, "logs")
        workers = "".join(f"\n--- {n}:\n" + open(os.path.join(logs, n)).read()[-2000:]
                          for n in sorted(os.listdir(logs)) if n.startswith("worker_")) \
            if os.path.isdir(logs) else ""
        return (open(log).read() if os.path.exists(log) else job) + workers + str(
            slurm_cluster.run(["scontrol", "show", "job", job]).stdout)

    try:
        first = [os.path.join(out, f"env_0_{r}.json") for r in (0, 1)]
        assert wait_for(lambda: all(os.path.exists(p) for p in first), 180), text()
        records = [json.load(open(p)) for p in first]
        assert records == [{"env": "SLURMEnvironment", "global_rank": r, "world_size": 2,
                            "local_rank": r, "step": 0} for r in (0, 1)], records
        # the requeue signal to the job's steps: srun's tasks, the adapters, each worker once
        assert slurm_cluster.run(["scancel", "--signal=USR1", job]).returncode == 0
        assert wait_for(lambda: any(n.startswith("hpc_ckpt_") for n in os.listdir(out)), 60), text()
        # requeued by Lightning's rank 0 (scontrol requeue). Slurm makes a requeued job
        # eligible again only ~2 min later (measured here: EligibleTime = requeue + 121 s), too
        # long for CI to wait for its second run; the requeue itself is in the job's record
        assert wait_for(lambda: "Restarts=1" in slurm_cluster.run(
            ["scontrol", "show", "job", job]).stdout, 60), text()
        assert "Requeued SLURM job: %s" % job in open(log).read(), text()
    finally:
        slurm_cluster.run(["scancel", job])
        slurm_cluster.wait_gone(job, 60)
