"""IPv6-only hosts end to end: two namespace hosts with only a ULA address each (fd00:231::/32,
``nodad``; no IPv4 address but loopback), sshd listening on the IPv6 address, the hostfile the two
literals. The launcher runs inside host 1, as on a cluster of such hosts.

* torch/gloo: a 2-host all_reduce on Open MPI 5 and 4.1 (4.1 refuses a colon in a node name, so
  the MPI is given the job's aliases: config/sshconfig.py): MASTER_ADDR is host 1's bare IPv6
  address, GLOO_SOCKET_IFNAME its interface from the IPv6 routes, and the ModelArts default
  ``NCCL_SOCKET_FAMILY=AF_INET`` reaches the worker as ``AF_INET6``.
* MindSpore: a 2-worker training job (its scheduler runs over IPv6: MS_SCHED_HOST bare).
* MPICH and Intel MPI cannot start proxies there (measured: docs/NETWORKS.md): one line, exit 2,
  nothing started.
"""
import os
import subprocess

import pytest

from helpers import EXAMPLES, REPO
from helpers.launch import clean_env
from helpers.mpis import HYDRA, OMPI4, OMPI5
from helpers.procs import wait_for

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

MS_PYTHON = "/opt/mpilaunch/ms-venv/bin/python"

ALLREDUCE = """import os, socket
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("ALLREDUCE", dist.get_rank(), socket.gethostname(), os.environ["MASTER_ADDR"],
      os.environ.get("GLOO_SOCKET_IFNAME"), os.environ.get("NCCL_SOCKET_FAMILY"), t.item(), flush=True)
dist.destroy_process_group()
"""


def _in_host1(th, argv, timeout=240):
    h1 = th.host(0)
    return subprocess.run(["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec",
                           h1.netns, *argv], env=clean_env(), cwd=REPO, timeout=timeout,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)


def test_the_hosts_have_no_ipv4_address(v6hosts):
    for h in v6hosts.hosts:
        v4 = v6hosts.run_in(h, ["ip", "-4", "-o", "addr", "show"]).stdout.split()
        assert [w for w in v4 if w.count(".") == 3 and not w.startswith("127.")] == [], v4
        assert ":" in h.addr


@pytest.mark.parametrize("mpi", [OMPI5, OMPI4], ids=["ompi5", "ompi4"])
def test_torch_gloo_all_reduce_over_ipv6(v6hosts, mpi, tmp_path):
    th = v6hosts
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    p = _in_host1(th, [mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun,
                       "--hostfile", th.hostfile(slots_per_host=1),
                       "--ssh-args", f"-F {th.ssh_config}", str(script)])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    got = {}
    for ln in p.stdout.splitlines():
        words = ln.split()
        if "ALLREDUCE" in words:
            i = words.index("ALLREDUCE")
            got[int(words[i + 1])] = tuple(words[i + 2:])
    assert got == {r: (h.hostname, th.hosts[0].addr, "eth0", "AF_INET6", "3.0")
                   for r, h in enumerate(th.hosts)}, p.stdout
    assert "cannot reach the launcher's control port" not in p.stderr, p.stderr


@pytest.mark.parametrize("mpirun", ["ompi5", "ompi4"])
def test_mindspore_two_workers_over_ipv6(v6hosts, mpirun, tmp_path):
    if not os.access(MS_PYTHON, os.X_OK):
        pytest.skip(f"MindSpore venv absent ({MS_PYTHON}); run scripts/setup_mindspore.sh")
    th = v6hosts
    launcher = os.path.join(os.path.dirname(MS_PYTHON), "mpirun") if mpirun == "ompi5" else OMPI4.mpirun
    p = _in_host1(th, [MS_PYTHON, "-m", "mpilaunch", "--python", MS_PYTHON, "--mpirun", launcher,
                       "--hostfile", th.hostfile(slots_per_host=1), "--ssh-args", f"-F {th.ssh_config}",
                       "--master_port", "38135", "--cluster_time_out", "90",
                       "--log_dir", str(tmp_path / "logs"),
                       os.path.join(EXAMPLES, "ms_train.py"), "--steps", "3", "--out", str(tmp_path / "out")])
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "MS_TRAIN_OK rank=0 size=2" in p.stdout and "MS_TRAIN_OK rank=1 size=2" in p.stdout
    assert "scheduler.log" in os.listdir(tmp_path / "logs")


@pytest.mark.parametrize("mpi", HYDRA)
def test_hydra_refuses_ipv6_hosts_in_one_line(v6hosts, mpi, tmp_path):
    th = v6hosts
    marker = tmp_path / "started"
    script = tmp_path / "start.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    p = _in_host1(th, [mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun,
                       "--hostfile", th.hostfile(slots_per_host=1),
                       "--ssh-args", f"-F {th.ssh_config}", str(script)], timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mpilaunch: error: host {th.hosts[1].addr}: ")
    assert "cannot launch on IPv6 hosts" in lines[0]
    assert not marker.exists()
    assert wait_for(lambda: th.leftovers() == {}, timeout=10) is True, th.leftovers()   # its session leaving


def test_check_deep_over_ipv6(v6hosts):
    """The probe's agent listens dual-stack and the links are measured over IPv6."""
    th = v6hosts
    p = _in_host1(th, [OMPI5.python, "-m", "mpilaunch", "check", "--hostfile", th.hostfile(slots_per_host=1),
                       "--ssh-args", f"-F {th.ssh_config}", "--deep"], timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    head = [ln for ln in lines if ln.startswith("HOST ")][0].split()
    rows = {ln.split()[0]: dict(zip(head, ln.split())) for ln in lines if ln.startswith("fd00:231:")}
    assert sorted(rows) == sorted(h.addr for h in th.hosts), p.stdout
    for row in rows.values():
        assert row["COMPUTE"].endswith("GF/s") and row["NET"].endswith("B/s"), p.stdout
