"""``--launcher srun`` inside a real Slurm (tests/helpers/slurm/): a rank's adapter killed by
SIGKILL ends the job at once with 137 and the rank named, as on the MPI launchers
(tests/e2e/test_dead_adapter.py; docs/HANGS.md). Marked ``slow`` and ``slurm``."""
import os
import shlex
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.procs import adapter_of_rank, alive, wait_for
from helpers.sigworker import channel_peers

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

SLEEPER = r'''
import os, sys, time
open(os.path.join(sys.argv[1], "up_" + os.environ["RANK"]), "w").close()
time.sleep(60)
'''
BOUND = 10.0


def test_a_killed_adapter_ends_the_srun_job_with_its_rank_named(slurm_cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    argv = [sys.executable, "-m", "mpilaunch", "--launcher", "srun", "--no-scheduler",
            "--master_port", "0", "--log_dir", str(out / "logs"), str(script), str(out)]
    text = "cd %s\nexec %s\n" % (shlex.quote(REPO), " ".join(shlex.quote(a) for a in argv))
    job, _, log = slurm_cluster.sbatch(text, ["-n4"], env=slurm_cluster.env(clean_env()),
                                       wait=False)
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(4)), 90), \
            open(log).read() if os.path.exists(log) else "no output"
        procs = [psutil.Process(p) for p in slurm_cluster.job_pids()]
        launcher = [p for p in procs if p.cmdline()[1:3] == ["-m", "mpilaunch"]][0]
        assert wait_for(lambda: channel_peers(launcher.pid) == 4, 20)
        victim = adapter_of_rank(procs, 1)
        assert victim is not None, procs
        t0 = time.monotonic()
        victim.kill()
        assert wait_for(lambda: not launcher.is_running() or
                        launcher.status() == psutil.STATUS_ZOMBIE, 60, 0.02)
        took = time.monotonic() - t0
        assert slurm_cluster.wait_gone(job, 60)
    finally:
        slurm_cluster.run(["scancel", job])
    err = open(log).read()
    assert slurm_cluster.job_record(job) == ("FAILED", "137:0"), err
    assert took < BOUND, (took, err)
    host = os.uname().nodename
    assert f"root cause: rank 1 (adapter) on host {host}: killed by signal 9 (SIGKILL)" in err, err
    assert wait_for(lambda: not alive(procs), 10) and not slurm_cluster.job_pids(), slurm_cluster.job_pids()
