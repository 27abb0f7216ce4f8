"""One ssh handshake per host. Under Open MPI no preflight runs before the launch: mpirun's own
ssh (given BatchMode and a connect time-out) is the only login each host sees, and a daemon that
did not start is explained afterwards by the same checks, naming the host and the fix; nothing is
left (no run dir, no ssh master). Hydra keeps the preflight, whose login leaves a control master
for its ssh (tests/multihost/test_hydra_multinode.py). Real sshd in the namespace test hosts;
the pure parts (mpilaunch/ssh.py mux_*, start_options) without them."""
import os
import re
import sys
from collections import namedtuple

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS

from mpilaunch import ssh

HELLO = os.path.join(REPO, "examples", "hello.py")


def _accepted(host):
    with open(host.sshd_log, errors="replace") as fh:
        return sum(1 for line in fh if "Accepted " in line)


def _masters(run_dir):
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if run_dir in cmd and "cm-" in cmd:
            out.append(p)
    return out


def _launch(th, mpirun, hostfile, tmp_path, *extra):
    args = [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hostfile,
            "--ssh-args", f"-F {th.ssh_config}", "--no-scheduler", "-v",
            "--log_dir", str(tmp_path / "logs"), *extra, HELLO]
    return th.run_in(0, args, timeout=120, env=clean_env(), cwd=REPO)


def _run_dir(stderr):
    m = re.search(r"--hostfile (/\S+)/hostfile", stderr) or re.search(r"ControlPath=(/\S+)/cm-", stderr)
    assert m, stderr
    return m.group(1)


@pytest.mark.multinode
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_one_login_per_host_and_nothing_left(testhosts_healthy, mpirun, tmp_path):
    th = testhosts_healthy
    hostfile = th.hostfile(slots_per_host=1, n_hosts=3)
    before = [_accepted(h) for h in th.hosts[1:]]
    proc = _launch(th, mpirun, hostfile, tmp_path, "-np", "3")
    assert proc.returncode == 0, proc.stderr
    assert "BatchMode=yes -o ConnectTimeout=10" in proc.stderr and "ControlPath" not in proc.stderr
    assert sorted(re.findall(r"hello rank=(\d)", proc.stdout)) == ["0", "1", "2"]
    # mpirun's own ssh is the only handshake each remote host saw: no preflight login
    assert [_accepted(h) - b for h, b in zip(th.hosts[1:], before)] == [1, 1]
    run_dir = _run_dir(proc.stderr)
    assert not os.path.exists(run_dir)
    assert not psutil.wait_procs(_masters(run_dir), timeout=3)[1]


@pytest.mark.multinode
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_a_failed_daemon_start_names_the_host_and_leaves_nothing(testhosts_healthy, mpirun, tmp_path):
    th = testhosts_healthy
    hostfile = th.hostfile(slots_per_host=1, n_hosts=3)
    with th.host_lost(2, "sshd"):
        proc = _launch(th, mpirun, hostfile, tmp_path, "-np", "3")
    assert proc.returncode == 255, proc.stderr
    summary = proc.stderr[proc.stderr.index("mpilaunch: job failed"):]
    assert f"  root cause: mpirun could not start on 1 host(s): {th.hosts[2].addr}\n" in summary
    assert (f"    {th.hosts[2].addr}: ssh port {th.port} closed — is sshd running there? "
            "(SSHD_PORT/--ssh-port)\n") in summary
    run_dir = _run_dir(proc.stderr)
    assert not os.path.exists(run_dir)
    assert not psutil.wait_procs(_masters(run_dir), timeout=3)[1]


@pytest.mark.multinode
def test_no_preflight_no_control_path(testhosts_healthy, tmp_path):
    th = testhosts_healthy
    proc = _launch(th, MPIRUNS[0].values[0], th.hostfile(slots_per_host=1, n_hosts=2), tmp_path,
                   "-np", "2", "--no-preflight")
    assert proc.returncode == 0, proc.stderr
    assert "ControlPath" not in proc.stderr and "BatchMode" not in proc.stderr


# ------------------------------------------------------------------ pure parts

def test_mux_path_rules(tmp_path):
    assert ssh.mux_path("/tmp/mpilaunch-abc", 2) == "/tmp/mpilaunch-abc/cm-%C"
    assert ssh.mux_path(None, 2) is None
    assert ssh.mux_path("/tmp/mpilaunch-abc", ssh.MUX_MAX_HOSTS + 1) is None
    assert ssh.mux_path("/tmp/" + "d" * 60, 2) is None          # no room for a unix socket
    assert ssh.mux_path("/tmp/with space", 2) is None           # would split the ssh args
    assert ssh.mux_master_options(None) == ssh.mux_client_options(None) == []
    assert "ControlMaster=no" in ssh.mux_client_options("/x/cm-%C")
    assert "ControlPersist=%d" % ssh.MUX_PERSIST in ssh.mux_master_options("/x/cm-%C")


def test_start_options_never_prompt_and_bound_the_connect():
    assert ssh.start_options(10) == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    assert ssh.start_options(0.2) == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=1"]


def test_close_masters_without_sockets_is_a_no_op(tmp_path):
    assert ssh.close_masters(str(tmp_path)) == 0
    assert ssh.close_masters(str(tmp_path / "gone")) == 0
    assert ssh.close_masters(None) == 0


def test_ssh_options_in_the_mca_args_turn_the_mux_off():
    from mpilaunch import run

    from mpilaunch.config import mpiargs

    S = namedtuple("S", "value source")
    T = namedtuple("T", "path x_tokens mca_tokens")

    def C(mca, extra, tune):   # the configuration's field the rule reads: the pieces, split once
        return namedtuple("C", "mpi_pieces")(mpiargs.pieces((mca, extra), tune))
    assert run._ssh_args_in_mca(C(S("-mca plm_rsh_args '-p 2222'", "x"), S("", "y"), None))
    assert run._ssh_args_in_mca(C(S("", "x"), S("", "y"), T("tune", (), ("--mca", "plm_rsh_args", "-p 2"))))
    assert not run._ssh_args_in_mca(C(S("-mca pml ob1", "x"), S("", "y"), None))
