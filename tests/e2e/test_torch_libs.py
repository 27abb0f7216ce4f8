"""Lightning (Fabric and Trainer), HF Accelerate and DeepSpeed's init_distributed take a
launch by mpilaunch for torchrun's and end with the weights of torchrun's run of the same
script (tests/helpers/torchlibs/): on one host, and after an in-place restart (the restart
count and the job's run id as torchrun gives them). Inside Slurm: tests/slurm/test_torch_libs.py;
across hosts: tests/multihost/test_torch_libs.py."""
import json
import os
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.torchlibs import SCRIPT, check, needs_libs, torchrun_reference

pytestmark = [pytest.mark.torch, pytest.mark.slow, needs_libs]


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    return torchrun_reference(tmp_path_factory)


def _launch(tmp_path, *args, script_args=()):
    out = tmp_path / "out"
    out.mkdir()
    p = subprocess.run(mpilaunch_argv("-np", "2", "--master_port", "0", "--log_dir",
                                      str(tmp_path / "logs"), "--tail_worker_log", "none",
                                      *args, SCRIPT, "--out", str(out), *script_args),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    return p, str(out)


def test_one_host_every_library_sees_torchrun(reference, tmp_path):
    p, out = _launch(tmp_path)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = check(out, reference)
    assert records[0]["env"]["OMP_NUM_THREADS"] == "1"
    assert "OMP_NUM_THREADS=1 for every worker" in p.stderr      # said once, as torchrun does
    assert p.stderr.count("OMP_NUM_THREADS=1 for every worker") == 1
    assert [r["env"]["TORCHELASTIC_ERROR_FILE"] for r in records] == [
        str(tmp_path / "logs" / f"error_{r}.json") for r in range(2)]


def test_after_an_in_place_restart(reference, tmp_path):
    p, out = _launch(tmp_path, "--max_restarts", "1", "--restart-mode", "in-place",
                     "--rdzv-id", "job-17", script_args=("--fail-rank", "1"))
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    failed = json.load(open(os.path.join(out, "failed_1.json")))
    assert (failed["TORCHELASTIC_RUN_ID"], failed["TORCHELASTIC_RESTART_COUNT"]) == ("job-17", "0")
    records = check(out, reference)
    for r, rec in enumerate(records):
        assert (rec["env"]["TORCHELASTIC_RUN_ID"], rec["env"]["TORCHELASTIC_RESTART_COUNT"]) == (
            "job-17", "1")
        assert rec["env"]["TORCHELASTIC_ERROR_FILE"] == str(
            tmp_path / "logs" / "attempt1" / f"error_{r}.json")
