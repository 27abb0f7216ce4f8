"""mpilaunch inside a real 2-node Slurm job (tests/helpers/slurm/multinode.py: slurmctld here, one
slurmd + munged in each of 2 namespace test hosts, 2 task slots each): ``sbatch -N2
--ntasks-per-node=2`` of a script that calls mpilaunch with no hostfile, through mpirun
(Open MPI 5 wheel and 4.1: daemons started through srun, no ssh) and ``--launcher srun``:

* identity: ranks 0-1 on node 1 and 2-3 on node 2, LOCAL_RANK, node index, the rendezvous at
  rank 0's node address, broadcast values byte-exact on the remote node;
* PyTorch DDP (gloo) over the 2 nodes, params equal to the single-process reference;
* ``scancel`` mid-run: every worker saves on SIGTERM, nothing is left on any node (scan of
  each node's network namespace), the launcher names the cause.

Marked ``slurm``, ``multinode``, ``slow``."""
import os
import re
import shlex
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS, OMPI5_MPIRUN as OMPI5
from helpers.slurm.jobs import EXACT, WORKER, read_ranks

pytestmark = [pytest.mark.slow, pytest.mark.slurm, pytest.mark.multinode]

EXAMPLES = os.path.join(REPO, "examples")
LAUNCHERS = [pytest.param(("mpirun", OMPI5), id="mpirun-ompi5"),
             pytest.param(("mpirun", MPIRUNS[1].values[0]), id="mpirun-ompi4",
                          marks=MPIRUNS[1].marks),
             pytest.param(("srun", None), id="srun")]


def _launch(out, launcher, mpirun, *script):
    argv = [sys.executable, "-m", "mpilaunch", "--no-scheduler", "--log_dir", out,
            "--master_port", "0", "--launcher", launcher, "-v"]
    if mpirun:
        argv += ["--mpirun", mpirun]
    return " ".join(shlex.quote(a) for a in argv + list(script))


def _job(out, *lines, mode="ok"):
    return "cd %s\nexport OUT=%s MODE=%s\n%s\n" % (shlex.quote(REPO), shlex.quote(out), mode,
                                                     "\n".join(lines))


def _env(cluster):
    return cluster.env(clean_env(**EXACT))


def _out(tmp_path):
    out = str(tmp_path / "out")
    os.makedirs(out, mode=0o755)
    return out


def _check_ranks(ranks, job, nodes):
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"]
    assert [r["host"] for r in ranks] == [nodes[0].hostname] * 2 + [nodes[1].hostname] * 2
    assert {r["WORLD_SIZE"] for r in ranks} == {"4"}
    assert [r["LOCAL_RANK"] for r in ranks] == ["0", "1", "0", "1"]
    assert {r["LOCAL_WORLD_SIZE"] for r in ranks} == {"2"}
    assert [r["GROUP_RANK"] for r in ranks] == [r["NODE_RANK"] for r in ranks] == [
        "0", "0", "1", "1"]
    # the rendezvous: rank 0's node address (not loopback: the ranks span 2 nodes), met there
    assert {r["MASTER_ADDR"] for r in ranks} == {nodes[0].addr}
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert ranks[0]["peers"] == [1, 2, 3]
    assert {r["SLURM_JOB_ID"] for r in ranks} == {job}
    for r in ranks:
        for k, v in EXACT.items():
            assert r["MA_"][k] == v, (r["RANK"], k)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_two_nodes_identity_and_broadcast(slurm_nodes, tmp_path, launcher):
    if launcher[1] and not os.access(launcher[1], os.X_OK):
        pytest.skip(launcher[1] + " not installed")
    out = _out(tmp_path)
    job, rc, log = slurm_nodes.sbatch(_job(out, "export MPILAUNCH_DEBUG_AGREE=1",
                                           "exec " + _launch(out, *launcher, WORKER)),
                                      ["-N2", "--ntasks-per-node=2"], env=_env(slurm_nodes))
    text = open(log).read()
    assert rc == 0, text + slurm_nodes.logs()
    _check_ranks(read_ranks(out, 4), job, slurm_nodes.hosts)
    # rank 0's address from Slurm's NodeAddr, the node index from the plan (mpirun) or
    # SLURM_NODEID (srun), the port picked by the launcher: no adapter loads MPI any more
    addr = slurm_nodes.hosts[0].addr
    for rank, node in enumerate([0, 0, 1, 1]):
        assert re.search(r"rank %d node %d agreement: used_mpi=False mpi4py_loaded=False at "
                         r"%s:\d+$" % (rank, node, re.escape(addr)), text, re.M), text
    assert "s3cr3t" not in text
    assert slurm_nodes.job_record(job) == ("COMPLETED", "0:0")
    if launcher[0] == "mpirun":    # inside the allocation: no ssh preflight, no ssh at all
        assert "preflight" not in text and "plm_rsh_args" not in text


@pytest.mark.parametrize("launcher", [LAUNCHERS[0], LAUNCHERS[2]])
def test_two_nodes_pytorch_ddp_equals_reference(slurm_nodes, tmp_path, launcher):
    pytest.importorskip("torch")
    sys.path.insert(0, EXAMPLES)
    import compare_params

    out = _out(tmp_path)
    train = _launch(out, *launcher, os.path.join(EXAMPLES, "torch_train.py"), "--steps", "3",
                    "--out", out)
    job, rc, log = slurm_nodes.sbatch(_job(out, "exec " + train),
                                      ["-N2", "--ntasks-per-node=2"], env=_env(slurm_nodes),
                                      timeout=240)
    text = open(log).read()
    assert rc == 0, text
    for r in range(4):
        assert "TORCH_TRAIN_OK rank=%d size=4" % r in text, text
    ref = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_train.py"),
                          "--reference", "--world-size", "4", "--steps", "3", "--out", out],
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    print(compare_params.check(out, 4, reference=True, steps=3))


def _leftovers(cluster, node):
    """Processes inside the node's network namespace other than the test host's sshd (and
    its sessions) and the Slurm daemons we started there (psutil scan)."""
    host = cluster.host_of(node)
    ns = os.stat("/run/netns/" + host.netns).st_ino
    keep = {host.sshd_pid, cluster.procs["munged@" + node].pid,
            cluster.procs["slurmd@" + node].pid, cluster.slurmd_pid(node)}
    try:
        keep |= {c.pid for c in psutil.Process(host.sshd_pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        pass
    left = []
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if (p.pid not in keep and p.info["status"] != psutil.STATUS_ZOMBIE
                    and os.stat("/proc/%d/ns/net" % p.pid).st_ino == ns):
                left.append((p.pid, p.info["cmdline"]))
        except OSError:
            pass
    return left


@pytest.mark.parametrize("launcher", [LAUNCHERS[0], LAUNCHERS[2]])
def test_two_nodes_scancel_leaves_nothing(slurm_nodes, tmp_path, launcher):
    out = _out(tmp_path)
    job, _, log = slurm_nodes.sbatch(_job(out, "exec " + _launch(out, *launcher, WORKER),
                                          mode="hang"),
                                     ["-N2", "--ntasks-per-node=2"], env=_env(slurm_nodes),
                                     wait=False)
    deadline = time.monotonic() + 90
    while not all(os.path.exists(os.path.join(out, "started-%d" % r)) for r in range(4)):
        assert time.monotonic() < deadline, open(log).read() if os.path.exists(log) else job
        time.sleep(0.2)
    assert all(slurm_nodes.job_pids(n) for n in slurm_nodes.nodes)   # running on both
    assert slurm_nodes.run(["scancel", job]).returncode == 0
    assert slurm_nodes.wait_gone(job, 30)
    deadline = time.monotonic() + 15
    while any(slurm_nodes.job_pids(n) or _leftovers(slurm_nodes, n) for n in slurm_nodes.nodes):
        assert time.monotonic() < deadline, {n: _leftovers(slurm_nodes, n)
                                             for n in slurm_nodes.nodes}
        time.sleep(0.2)
    for r in range(4):
        assert open(os.path.join(out, "saved-%d" % r)).read() == "15", r
    text = open(log).read()
    assert slurm_nodes.job_record(job)[0] == "CANCELLED"
    assert "  scheduler: Slurm job %s: cancelled by the scheduler (scancel)" % job in text, text
    assert slurm_nodes.zombies() == []


def test_check_inside_the_allocation(slurm_nodes, tmp_path):
    """``mpilaunch check`` in a 2-node job checks the allocation (node state, a step on each
    node running the probe) instead of ssh; a drained node fails it and is named."""
    out = _out(tmp_path)
    node2 = slurm_nodes.nodes[1]
    check = [sys.executable, "-m", "mpilaunch", "check", "--mpirun", OMPI5, "--table"]
    q = " ".join(shlex.quote(a) for a in check)
    script = _job(out, "%s %s; echo CHECK1=$?" % (q, shlex.quote(WORKER)),
                  "scontrol update nodename=%s state=drain reason=mpltest" % node2,
                  "%s --ssh-only; echo CHECK2=$?" % q,
                  "scontrol update nodename=%s state=resume" % node2)
    try:
        job, rc, log = slurm_nodes.sbatch(script, ["-N2", "--ntasks-per-node=2"],
                                          env=_env(slurm_nodes))
    finally:
        slurm_nodes.run(["scontrol", "update", "nodename=" + node2, "state=resume"])
    text = open(log).read()
    first, second = text.split("CHECK1=")
    assert "CHECK1=0" in text, text
    assert "4 host(s)" not in first and "2 host(s) from Slurm job %s" % job in first, first
    assert "mpilaunch check: OK — 2 host(s) passed" in first, first
    rows = [line.split() for line in first.splitlines() if line.startswith(tuple(
        slurm_nodes.nodes))]
    assert [r[0] for r in rows] == slurm_nodes.nodes, first
    head = next(line for line in first.splitlines() if line.startswith("HOST"))
    assert "NODE  SRUN  PYTHON" in head and "SSH" not in head, head
    assert "CHECK2=1" in second, second
    assert "FAIL %s: Slurm State=ALLOCATED+DRAIN, Reason=mpltest [root@" % node2 in second, second
    print(text)
    assert "sbatch --exclude=%s" % node2 in second
