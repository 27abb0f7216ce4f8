"""Across two namespace hosts (one rank each, launched from host 1 as worker-0 does, with
torchrun's --nnodes / --nproc-per-node checked against the hostfile), Lightning, Accelerate
and DeepSpeed take a launch by mpilaunch for torchrun's and end with the weights of
torchrun's 2-rank run (tests/helpers/torchlibs/): GROUP_WORLD_SIZE is what Lightning's
num_nodes must equal."""
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.ports import free_port
from helpers.torchlibs import SCRIPT, check, needs_libs, torchrun_reference

pytestmark = [pytest.mark.multinode, pytest.mark.slow, pytest.mark.torch, needs_libs]


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    return torchrun_reference(tmp_path_factory)


def test_every_library_sees_torchrun_across_two_hosts(testhosts, reference, tmp_path):
    th = testhosts
    out = tmp_path / "out"
    out.mkdir()
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    p = th.run_in(0, [sys.executable, "-m", "mpilaunch", "--hostfile", hf, "--ssh-args",
                      f"-F {th.ssh_config}", "--nnodes", "2", "--nproc-per-node", "1",
                      "--master_port", str(free_port()), "--log_dir", str(tmp_path / "logs"),
                      SCRIPT, "--out", str(out)], timeout=300, env=clean_env(), cwd=REPO)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = check(str(out), reference)
    assert [r["env"]["GROUP_WORLD_SIZE"] for r in records] == ["2", "2"]
    assert [r["env"]["OMP_NUM_THREADS"] for r in records] == [None, None]   # one rank per host
