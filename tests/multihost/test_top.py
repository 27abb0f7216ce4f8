"""``mpilaunch top --once LOG_DIR`` across 3 namespace test hosts (docs/MONITOR.md): the
launcher runs in host 1 (as worker-0 does), one rank per host; the command, run in host 1 with
only the log dir, shows every rank on its own host, sampled there by its adapter and sent over
the launcher's control channel (no ssh of its own). Released, the job completes and nothing of
it is left."""
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import ALL
from helpers.procs import alive, descendants, wait_for

pytestmark = pytest.mark.multinode

WAITER = r'''
import os, sys, time
print("rank", os.environ["RANK"], "up", flush=True)
while not os.path.exists(os.path.join(sys.argv[1], "release")):
    time.sleep(0.05)
'''


def _in_host1(th, argv):
    h1 = th.host(0)
    return ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns, *argv]


def _rows(stdout):
    lines = stdout.splitlines()
    at = next((i for i, line in enumerate(lines) if line.startswith("RANK ")), len(lines))
    return {int(c[0]): c for c in (line.split() for line in lines[at + 1:]) if c and c[2] == "worker"}


@pytest.mark.parametrize("mpi", [m for m in ALL if m.id == "ompi5"])
def test_top_once_across_three_hosts_shows_each_rank_on_its_host(testhosts_healthy, mpi, tmp_path):
    th = testhosts_healthy
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    logs = tmp_path / "logs"
    argv = [sys.executable, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--python", sys.executable,
            "--hostfile", th.hostfile(slots_per_host=1, n_hosts=3),
            "--ssh-args", f"-F {th.ssh_config}", "--no-scheduler", "--master_port", "0",
            "--sample-interval", "5", "--log_dir", str(logs), str(script), str(tmp_path)]
    proc = subprocess.Popen(_in_host1(th, argv), env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    want = {r: th.hosts[r].hostname for r in range(3)}

    def shown():
        got = subprocess.run(_in_host1(th, [sys.executable, "-m", "mpilaunch", "top", "--once",
                                            str(logs)]),
                             env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=60)
        rows = _rows(got.stdout) if got.returncode == 0 else {}
        every = sorted(rows) == [0, 1, 2] and all(c[3] == "running" and c[5] != "0" for c in rows.values())
        return (got, rows) if every else None

    try:
        seen = wait_for(shown, 120, interval=0.5)
        assert seen, proc.stderr.read() if proc.poll() is not None else "not every rank sampled"
    except BaseException:
        proc.kill()
        raise
    got, rows = seen
    kids = descendants(proc.pid)
    (tmp_path / "release").touch()
    _, err = proc.communicate(timeout=120)
    assert got.stdout.startswith("mpilaunch top: 3 ranks, attempt 0, restarts 0"), got.stdout
    assert {r: c[1] for r, c in rows.items()} == want, got.stdout
    assert proc.returncode == 0, err
    assert wait_for(lambda: not alive(kids), 10), alive(kids)
