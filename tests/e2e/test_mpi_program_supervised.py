"""An mpi4py program run supervised (no ``--exec``) on one host, under every MPI: the worker is
the process that speaks to the MPI launcher. Under Hydra (MPICH, Intel MPI) that is the simple
PMI socket named by ``PMI_FD``, which the adapter must hand to the worker open (it used to be
closed: MPICH failed in PMI_Init with exit 15, Intel MPI crashed with SIGSEGV)."""
import subprocess

import pytest

from helpers.launch import clean_env
from helpers.mpis import ALL, mpilaunch_argv
from helpers.ports import free_port

HELLO = """\
from mpi4py import MPI
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
print(f"hello from {comm.Get_rank()} of {comm.Get_size()}, sum {total}", flush=True)
"""


@pytest.mark.parametrize("mpi", ALL)
def test_mpi4py_program_runs_supervised(tmp_path, mpi):
    (tmp_path / "hello.py").write_text(HELLO)
    p = subprocess.run(mpilaunch_argv(mpi, "-np", "2", "--master_port", str(free_port()),
                                      "--log_dir", str(tmp_path / "logs"), "hello.py"),
                       cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    for r in range(2):
        log = (tmp_path / "logs" / f"worker_{r}.log").read_text()
        assert f"hello from {r} of 2, sum 3" in log, log
