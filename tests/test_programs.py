"""Programs users bring (issue 14), run for real: MPI programs under --exec, ..."""
import subprocess

import pytest

from launchutil import MPIRUNS, OMPI5, REPO, clean_env, free_port, mpilaunch_argv

FAIL_AFTER_INIT = """\
from mpi4py import MPI
import sys
if MPI.COMM_WORLD.Get_rank() == 1:
    sys.exit(1)
MPI.COMM_WORLD.Barrier()
"""


def launch(args, tmp_path, timeout=120, **kw):
    return subprocess.run(mpilaunch_argv(*args), env=clean_env(TMPDIR=tmp_path), cwd=kw.pop("cwd", REPO),
                          capture_output=True, text=True, timeout=timeout,
                          stdin=kw.pop("stdin", subprocess.DEVNULL), **kw)


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_exec_failure_is_named_from_open_mpis_own_report(mpirun, tmp_path):
    # was: "no rank reported a failure" while prterun named the process
    script = tmp_path / "fail.py"
    script.write_text(FAIL_AFTER_INIT)
    proc = launch(["--mpirun", mpirun, "--exec", "-np", "2", "--master_port", free_port(), str(script)], tmp_path)
    assert proc.returncode == 1, proc.stderr
    summary = proc.stderr[proc.stderr.index("mpilaunch: job failed"):]
    if mpirun == OMPI5:
        assert "root cause: rank 1 (process) on host " in summary and ": exit code 1" in summary, summary
        assert "error: the process called MPI_Abort" in summary
    else:
        # Open MPI 4.1 with mpi4py's (5.x) library prints no process name: nothing to parse
        assert "no rank reported a failure" in summary
