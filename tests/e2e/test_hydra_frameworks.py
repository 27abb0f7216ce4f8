"""Real MindSpore (CPU) data-parallel training under MPICH's and Intel MPI's mpiexec:
2 workers + the scheduler on rank 0, params identical on both ranks and equal to the
single-process reference, as on Open MPI (tests/e2e/test_frameworks.py)."""
import os
import subprocess

import pytest

from helpers import REPO
from helpers.frameworks import MS_PY, MS_TRAIN, compare_params, needs_ms, reference
from helpers.launch import clean_env
from helpers.mpis import HYDRA
from helpers.ports import free_port


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
@pytest.mark.parametrize("mpi", HYDRA)
def test_mindspore_data_parallel_training_under_hydra(mpi, tmp_path):
    # the ranks run the MindSpore venv's interpreter; mpiexec.hydra is the Hydra venv's
    argv = [MS_PY, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--python", MS_PY, "-np", "2",
            "--master_port", free_port(), "--log_dir", str(tmp_path / "logs"),
            MS_TRAIN, "--out", str(tmp_path / "out"), "--steps", "4"]
    proc = subprocess.run(argv, env=clean_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[rank0] MS_TRAIN_OK rank=0 size=2" in proc.stdout
    assert "[rank1] MS_TRAIN_OK rank=1 size=2" in proc.stdout
    assert sorted(n for n in os.listdir(tmp_path / "logs") if not n.startswith(".")) == ["events.jsonl", "scheduler.log", "worker_0.log", "worker_1.log"]
    reference(MS_PY, MS_TRAIN, tmp_path, 4)
    compare_params.check(str(tmp_path / "out"), 2, reference=True, steps=4)
