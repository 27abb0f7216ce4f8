"""The rank adapter across 2 namespace hosts (tests/helpers/fixtures_hosts.py), under real mpirun
started inside host 1: the MPI agreement (node index, rank 0's address, port 0, port in
use) and teardown when a worker on host 2 dies. Ports 28140-28149."""
import os
import subprocess
import sys
import time

import pytest

from helpers import REPO
from helpers.adapter import infos, status_lines, write_worker
from helpers.mpis import OMPI4_MPIRUN, OMPI5_MPIRUN
from helpers.procs import pid_alive as alive, wait_for

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

MPIRUNS = {"ompi5": (OMPI5_MPIRUN, 28140), "ompi41": (OMPI4_MPIRUN, 28145)}   # with their first port


@pytest.fixture(params=sorted(MPIRUNS))
def mpi(request):
    path, base = MPIRUNS[request.param]
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not installed")
    return path, base


def run_in_host1(th, mpirun, tmp_path, *opts, port, env_extra=None, timeout=90):
    script, out = write_worker(tmp_path)
    env = dict(os.environ, PYTHONPATH=REPO, T_DIR=out, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", **(env_extra or {}))
    xs = [a for n in sorted(env) if n == "PYTHONPATH" or n.startswith("T_") for a in ("-x", n)]
    hf = th.hostfile(slots_per_host=2, n_hosts=2)
    cmd = [mpirun, "-np", "4", "--hostfile", hf, *th.mpirun_ssh_flags(mpirun), *xs,
           sys.executable, "-m", "mpilaunch.rank", "--log-dir", str(tmp_path / "logs"),
           "--master-port", str(port), *opts, "--", script]
    t0 = time.monotonic()
    p = th.run_in(0, cmd, env=env, cwd=REPO, timeout=timeout)
    return p, time.monotonic() - t0, out


def test_agreement_across_two_hosts(testhosts, mpi, tmp_path):
    th = testhosts
    mpirun, base = mpi
    p, _, out = run_in_host1(th, mpirun, tmp_path, "--master-port", "0", port=0,
                             env_extra={"T_WORKER": "await:sched_0"})
    assert p.returncode == 0, p.stdout + p.stderr
    got = infos(out)
    assert set(got) == {"worker_0", "worker_1", "worker_2", "worker_3", "sched_0"}
    h1 = th.hosts[0]
    ports = set()
    for r in range(4):
        e = got[f"worker_{r}"]["env"]
        assert (e["RANK"], e["LOCAL_RANK"], e["NODE_RANK"], e["GROUP_RANK"]) == (
            str(r), str(r % 2), str(r // 2), str(r // 2))
        assert e["MS_SCHED_HOST"] == e["MASTER_ADDR"] == h1.addr      # never 127.0.0.1
        ports.add(e["MS_SCHED_PORT"])
    assert len(ports) == 1 and ports != {"0"}
    assert got["sched_0"]["env"]["MS_SCHED_HOST"] == h1.addr


def test_port_in_use_on_rank0_host(testhosts, mpi, tmp_path):
    th = testhosts
    mpirun, base = mpi
    port = base + 1
    # hold the port inside host 1's network namespace for the duration of the job
    h1 = th.hosts[0]
    hold = subprocess.Popen(["ip", "netns", "exec", h1.netns, sys.executable, "-c",
                             "import socket,sys; s=socket.socket(); "
                             f"s.bind(('0.0.0.0',{port})); s.listen(); print('ok',flush=True); "
                             "sys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout.readline().strip() == "ok"
        p, took, out = run_in_host1(th, mpirun, tmp_path, port=port)
    finally:
        hold.stdin.close()
        hold.wait(5)
    assert p.returncode == 2, p.stdout + p.stderr
    assert took < 20
    msgs = [l for l in p.stderr.splitlines() if l.startswith("mpilaunch.rank: error:")]
    assert len(msgs) == 1 and f"--master-port {port} is already in use on host {h1.hostname}" \
        in msgs[0]
    assert infos(out) == {}                  # with MPI every rank waited for the check


def test_worker_killed_on_host2_ends_the_job(testhosts, mpi, tmp_path):
    th = testhosts
    mpirun, base = mpi
    p, took, out = run_in_host1(th, mpirun, tmp_path, port=base + 2,
                                env_extra={"T_WORKER_3": "waitfile:4;await:sched_0;kill:9",
                                           "T_WORKER": "sleep:60", "T_SCHED": "sleep:60"})
    assert p.returncode == 137, p.stdout + p.stderr
    assert took < 40
    first = [l for l in status_lines(p.stderr) if l["cause"] == "self"]
    assert first and (first[0]["rank"], first[0]["signal"], first[0]["host"]) == (
        3, 9, th.hosts[1].hostname)
    pids = [i["pid"] for i in infos(out).values()]
    assert len(pids) == 5
    assert wait_for(lambda: not any(alive(pid) for pid in pids), timeout=10)
