"""Inside a Slurm allocation (tests/helpers/slurm/), Lightning, Accelerate and DeepSpeed take a
launch by mpilaunch for torchrun's and end with torchrun's weights (tests/helpers/torchlibs/):
``sbatch -N1 --ntasks-per-node=2`` and ``sbatch -n 2``, through mpirun and through ``--launcher
srun``. Under mpirun every rank inherits the batch step's ``SLURM_PROCID=0``: no library reads
it once ``TORCHELASTIC_RUN_ID`` is set (Lightning's first test), which is what keeps two ranks
from both being rank 0."""
import shlex
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.torchlibs import SCRIPT, check, needs_libs, torchrun_reference

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.torch, needs_libs]


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    return torchrun_reference(tmp_path_factory)


@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
@pytest.mark.parametrize("alloc", [["-N1", "--ntasks-per-node=2"], ["-n2"]], ids=["per-node", "n"])
def test_every_library_sees_torchrun_inside_slurm(slurm_cluster, reference, tmp_path, launcher,
                                                  alloc):
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "mpilaunch", "--launcher", launcher, "--log_dir",
            str(tmp_path / "logs"), "--master_port", "0", SCRIPT, "--out", str(out)]
    script = "cd %s\nexec %s\n" % (shlex.quote(REPO), " ".join(shlex.quote(a) for a in argv))
    job, rc, log = slurm_cluster.sbatch(script, alloc, env=slurm_cluster.env(clean_env()),
                                        timeout=300)
    text = open(log).read()
    assert rc == 0, text[-4000:]
    records = check(str(out), reference)
    procids = [r["env"]["SLURM_PROCID"] for r in records]
    # mpirun's ranks inherit the batch step's; srun's get their own
    assert procids == (["0", "0"] if launcher == "mpirun" else ["0", "1"])
    assert slurm_cluster.job_record(job) == ("COMPLETED", "0:0")
