"""The workers' signals and the graceful stop across hosts (docs/SIGNALS.md): the launcher in
test host 1, one rank of tests/helpers/sigworker.py there and one on host 2, through Open MPI 5
(every signal forwarded by mpirun and its remote daemon; the graceful stop over the launcher's
control channel: the remote adapter connects back to host 1's address, as Open MPI's daemon
does) and MPICH (also SIGUSR2, SIGTSTP and SIGCONT over the channel, whose key reaches the remote
adapter only because mpiexec's environment ends with a variable no rank needs: backends/hydra.py). In one job: SIGUSR1, SIGUSR2 reach both workers once; SIGTSTP stops both,
SIGCONT resumes both; then, under --term-grace, SIGTERM gives both their 2 s save."""
import os
import signal
import subprocess
import time

import psutil
import pytest

from helpers import REPO
from helpers import sigworker
from helpers.launch import clean_env
from helpers.mpis import IMPI, MPICH, OMPI5, params
from helpers.procs import kill_all, wait_for, with_arg

pytestmark = [pytest.mark.multinode, pytest.mark.slow]


@pytest.mark.parametrize("mpi", params([OMPI5, MPICH, IMPI]))
def test_signals_reach_the_worker_on_every_host(testhosts, mpi, tmp_path):
    th = testhosts
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    h1 = th.host(0)
    cmd = ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns,
           mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun, "--hostfile", hf,
           "--ssh-args", f"-F {th.ssh_config}", "--no-scheduler", "--master_port", "0",
           "--term-grace", "8", "--log_dir", str(tmp_path / "logs"), sigworker.PATH, str(out),
           "save", "0"]
    err_path = tmp_path / "launcher.err"
    with open(err_path, "w") as errf:
        proc = subprocess.Popen(cmd, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf)
    try:
        assert wait_for(lambda: sigworker.all_exist(out, "up", 2) or proc.poll() is not None, 90), \
            err_path.read_text()
        assert proc.poll() is None, err_path.read_text()
        launcher, = [p for p in with_arg(str(out)) if "mpilaunch" in p.cmdline()
                     and "-m" in p.cmdline()]
        workers = [p for p in with_arg(str(out)) if p.cmdline()[1:2] == [sigworker.PATH]]
        assert len(workers) == 2
        # one on each host: each test host is a network namespace of its own
        assert len({os.stat(f"/proc/{w.pid}/ns/net").st_ino for w in workers}) == 2
        # a signal mpilaunch sends over its channel reaches the adapters connected by then:
        # both, the remote one through host 1's address
        assert wait_for(lambda: sigworker.channel_peers(launcher.pid) == 2, 10), \
            err_path.read_text()
        for sig in (signal.SIGUSR1, signal.SIGUSR2):
            launcher.send_signal(sig)
            assert wait_for(lambda: sigworker.counts(out, sig.name, 2) == [1, 1], 10), \
                (sig, err_path.read_text())
        time.sleep(0.3)
        assert [sigworker.counts(out, n, 2) for n in ("SIGUSR1", "SIGUSR2")] == [[1, 1], [1, 1]]
        launcher.send_signal(signal.SIGTSTP)
        assert wait_for(lambda: all(w.status() == psutil.STATUS_STOPPED for w in workers), 10), \
            err_path.read_text()
        launcher.send_signal(signal.SIGCONT)
        assert wait_for(lambda: sigworker.counts(out, "SIGCONT", 2) == [1, 1], 10)
        assert all(w.status() != psutil.STATUS_STOPPED for w in workers)
        t0 = time.monotonic()
        launcher.send_signal(signal.SIGTERM)
        proc.wait(40)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            kill_all(with_arg(str(out)))
            proc.wait()
    err = err_path.read_text()
    assert proc.returncode == 143, err
    assert sigworker.all_exist(out, "saved", 2), err
    assert 2 <= took < 8, took
    assert "ended within the grace: rank 0, rank 1" in err, err
    assert wait_for(lambda: not with_arg(str(out)), 15), [p.cmdline() for p in with_arg(str(out))]
