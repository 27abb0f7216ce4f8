"""``mpilaunch stacks LOG_DIR`` across 3 namespace test hosts (docs/HANGS.md): the launcher runs
in host 1 (as worker-0 does), one rank per host; rank 2, on host 3, waits in load_batch while
ranks 0 and 1 block in all_reduce. The command, run in host 1 with only the log dir, reaches
every rank over the launcher's control channel (no ssh of its own): rank 2 and host 3 named;
released, the job completes. Open MPI 5 and Intel MPI."""
import os
import subprocess
import sys

import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import ALL
from helpers.procs import wait_for

pytestmark = pytest.mark.multinode

STUCK = r'''
import datetime, os, sys, time
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
out = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(hours=1))


def load_batch(step):
    if rank == 2 and step == 3:
        open(os.path.join(out, "stuck"), "w").close()
        while not os.path.exists(os.path.join(out, "release")):
            time.sleep(0.05)
    return torch.ones(4)


for step in range(6):
    x = load_batch(step)
    if step == 3:
        open(os.path.join(out, f"at3_{rank}"), "w").close()
    dist.all_reduce(x)
open(os.path.join(out, f"done_{rank}"), "w").close()
dist.destroy_process_group()
'''


def _in_host1(th, argv):
    h1 = th.host(0)
    return ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns, *argv]


@pytest.mark.parametrize("mpi", [m for m in ALL if m.id in ("ompi5", "impi")])
def test_stacks_across_three_hosts_names_the_stuck_rank_and_its_host(testhosts_healthy, mpi, tmp_path):
    th = testhosts_healthy
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    ssh = ["--ssh-args", f"-F {th.ssh_config}"]
    argv = [sys.executable, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--python", sys.executable,
            "--hostfile", hf, *ssh, "--no-scheduler", "--master_port", "38141",
            "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path)]
    proc = subprocess.Popen(_in_host1(th, argv), env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = lambda: (tmp_path / "stuck").exists() and all(   # noqa: E731
            (tmp_path / f"at3_{r}").exists() for r in (0, 1))
        assert wait_for(ready, 120), proc.stderr.read() if proc.poll() is not None else "not stuck"
        got = subprocess.run(_in_host1(th, [sys.executable, "-m", "mpilaunch", "stacks",
                                            str(tmp_path / "logs")]),
                             env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    except BaseException:
        proc.kill()
        raise
    line = STUCK.splitlines().index("            time.sleep(0.05)") + 1
    want = (f"verdict: rank 2 on host {th.hosts[2].hostname}: stuck.py:{line} in load_batch; "
            "ranks 0, 1 in all_reduce (torch.distributed)")
    assert got.returncode == 0, got.stdout + got.stderr
    assert want in got.stdout.splitlines(), got.stdout
    out_dir = got.stdout.split(" in ", 1)[1].split(" (")[0]
    assert open(os.path.join(out_dir, "rank_2.txt")).readline() == f"# rank 2 on host {th.hosts[2].hostname}\n"
    (tmp_path / "release").touch()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert all((tmp_path / f"done_{r}").exists() for r in range(3))
