"""A preempted training job saves its checkpoint on both of 2 hosts under a plain
``mpilaunch`` (Open MPI 5, the launcher in test host 1, one rank of
tests/helpers/preempt_worker.py on each host: a DataLoader of 2 worker processes; on SIGTERM the
step ends, the checkpoint is saved, exit 0). SIGTERM to mpilaunch reaches the remote rank's
worker over the launcher's control channel, with the default grace."""
import os
import signal
import subprocess
import sys

import pytest

from helpers import REPO
from helpers import sigworker
from helpers.launch import clean_env
from helpers.mpis import OMPI5
from helpers.procs import kill_all, wait_for, with_arg

pytestmark = [pytest.mark.multinode, pytest.mark.slow, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")]

WORKER = os.path.join(REPO, "tests", "helpers", "preempt_worker.py")


def test_sigterm_lets_the_rank_on_each_host_save(testhosts, tmp_path):
    th = testhosts
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    h1 = th.host(0)
    cmd = ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns,
           sys.executable, "-m", "mpilaunch", "--mpirun", OMPI5.mpirun,
           "--hostfile", th.hostfile(slots_per_host=1, n_hosts=2), "--ssh-args",
           f"-F {th.ssh_config}", "--no-scheduler", "--master_port", "0",
           "--log_dir", str(tmp_path / "logs"), WORKER, str(out)]
    err_path = tmp_path / "launcher.err"
    with open(err_path, "w") as errf:
        proc = subprocess.Popen(cmd, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf)
    try:
        assert wait_for(lambda: all((out / f"up_{r}").exists() for r in range(2))
                        or proc.poll() is not None, 120), err_path.read_text()
        assert proc.poll() is None, err_path.read_text()
        launcher, = [p for p in with_arg(str(out)) if "mpilaunch" in p.cmdline()
                     and "-m" in p.cmdline()]
        # the ranks' main processes (not the adapters, mpirun, ssh, or the DataLoaders' workers)
        workers = [p for p in with_arg(str(out)) if WORKER in p.cmdline()[1:3]
                   and WORKER not in " ".join(p.parent().cmdline()[1:3])]
        assert len({os.stat(f"/proc/{w.pid}/ns/net").st_ino for w in workers}) == 2, \
            [w.cmdline() for w in with_arg(str(out))]
        assert wait_for(lambda: sigworker.channel_peers(launcher.pid) == 2, 30), \
            err_path.read_text()
        launcher.send_signal(signal.SIGTERM)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            kill_all(with_arg(str(out)))
            proc.wait()
    err = err_path.read_text()
    assert proc.returncode == 143, err
    assert [(out / f"saved_{r}").exists() for r in range(2)] == [True, True], err
    assert "ended within the grace: rank 0, rank 1" in err, err
    assert wait_for(lambda: not with_arg(str(out)), 15), [p.cmdline() for p in with_arg(str(out))]
