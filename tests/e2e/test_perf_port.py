"""``--master_port 0`` with rank 0 on this machine: the launcher picks the port and hands it
down, so the adapters need no MPI agreement to learn it."""
import re

import pytest

from helpers.launch import clean_env, run
from helpers.mpis import MPIRUNS

SCRIPT = ("import os, sys\n"
          "print('PORT', os.environ['RANK'], os.environ['MASTER_PORT'], "
          "os.environ['MS_SCHED_PORT'], 'mpi4py' in sys.modules, flush=True)\n")


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_port_zero_is_picked_by_the_launcher(tmp_path, mpirun):
    script = tmp_path / "port.py"
    script.write_text(SCRIPT)
    proc = run(["--mpirun", mpirun, "-np", "3", "--oversubscribe", "--no-scheduler", "-v",
                "--master_port", "0", "--log_dir", str(tmp_path / "logs"), str(script)],
               env=clean_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    sent = re.findall(r"--master-port (\d+)", proc.stderr)
    assert len(sent) == 1 and sent[0] != "0", proc.stderr       # a concrete port in the argv
    seen = sorted(re.findall(r"PORT (\d) (\d+) (\d+) (\w+)", proc.stdout))
    assert seen == [(str(r), sent[0], sent[0], "False") for r in range(3)], proc.stdout


def test_dry_run_still_shows_port_zero(tmp_path):
    script = tmp_path / "port.py"
    script.write_text(SCRIPT)
    proc = run(["--dry-run", "-np", "2", "--master_port", "0", str(script)], env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "--master-port 0" in proc.stdout
