"""``mpilaunch top`` and ``stacks`` on a host that sees the job's log dir (a shared file system)
but not its launcher: one line naming the host the launcher runs on, exit 2, not "the job has
ended" (mpilaunch/stacks/command.py reads the host from LOG_DIR/.mpilaunch-stacks)."""
import os
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv


@pytest.mark.parametrize("command", ["top", "stacks"])
def test_a_job_launched_on_another_host_is_named_there(tmp_path, command):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / ".mpilaunch-stacks").write_text("/run/mpilaunch-x/stacks.sock\n4242\nnode-17\n")
    got = subprocess.run(mpilaunch_argv(command, *(["--once"] if command == "top" else []), str(logs)),
                         env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert (got.returncode, got.stdout) == (2, ""), got.stderr
    assert got.stderr == (f"mpilaunch: error: the job writing to {logs} runs its launcher on host "
                          "node-17 (mpilaunch pid 4242), not on this one: run this command there\n")
    # on its own host the same pointer is read as ever: a launcher that has gone is "ended"
    (logs / ".mpilaunch-stacks").write_text(f"/nonexistent/stacks.sock\n4242\n{os.uname().nodename}\n")
    got = subprocess.run(mpilaunch_argv(command, *(["--once"] if command == "top" else []), str(logs)),
                         env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert got.returncode == 2 and "does not answer at its socket: it has ended" in got.stderr, got.stderr
