"""The console and `mpilaunch logs` across 3 namespace test hosts (docs/LOGS.md): the launcher
runs in host 1, two ranks on each host; the dump every rank prints shows once with all six
ranks, each rank's own line shows, and `mpilaunch logs --host` gives the ranks of that host."""
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import ALL

pytestmark = pytest.mark.multinode

DUMP = r'''
import os, socket
rank = int(os.environ["RANK"])
for i in range(20):
    print(f"config.key_{i:02d} = value_{i}")
print(f"rank {rank} own line on {socket.gethostname()}", flush=True)
'''


def _in_host1(th, argv):
    h1 = th.host(0)
    return ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns, *argv]


@pytest.mark.parametrize("mpi", [m for m in ALL if m.id == "ompi5"])
def test_the_dump_shows_once_across_hosts_and_logs_by_host(testhosts_healthy, mpi, tmp_path):
    th = testhosts_healthy
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    logs = tmp_path / "logs"
    # a window no start-up skew reaches: each line shows once all six ranks printed it
    argv = [sys.executable, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--python", sys.executable,
            "--hostfile", th.hostfile(slots_per_host=2, n_hosts=3), "--ssh-args", f"-F {th.ssh_config}",
            "--no-scheduler", "--master_port", "0", "--console_collapse", "600", "--log_dir", str(logs), str(script)]
    p = subprocess.run(_in_host1(th, argv), env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert [ln for ln in lines if "config.key_" in ln] == [f"[rank0-5] config.key_{i:02d} = value_{i}"
                                                           for i in range(20)]
    owners = {r: th.hosts[r // 2].hostname for r in range(6)}
    assert sorted(ln for ln in lines if "own line" in ln) == sorted(
        f"[rank{r}] rank {r} own line on {owners[r]}" for r in range(6))
    got = subprocess.run([sys.executable, "-m", "mpilaunch", "logs", str(logs), "--host", owners[4],
                          "--grep", "own line"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert (got.returncode, got.stderr) == (0, "")
    assert sorted(got.stdout.splitlines()) == [f"[rank{r}] rank {r} own line on {owners[4]}" for r in (4, 5)]
