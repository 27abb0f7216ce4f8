"""MPICH and Intel MPI (Hydra's mpiexec) across the namespace test hosts, checked as
tests/multihost/test_multinode.py checks Open MPI: placement, LOCAL_RANK, node index, rank 0's address,
byte-exact broadcast on remote ranks, PyTorch DDP equal to the single-process reference, a
SIGKILLed worker and a lost host ending the job everywhere with nothing left.

The launcher runs inside host 1's namespaces. ssh reaches the other hosts on port 2222 through
``--ssh-port 2222`` and a copy of the fixture's ssh config WITHOUT its ``Port`` line, so a job
that runs proves the port reached the ssh that starts Hydra's proxies (MPICH:
HYDRA_LAUNCHER_EXTRA_ARGS, Intel MPI: -bootstrap-exec-args); the sshd logs' "Accepted" lines
tell whether that ssh went through the preflight's control master.

PyTorch lives in the test runner's interpreter, not in the Hydra venvs: the DDP test gives
``--python`` that interpreter (the adapter needs no mpi4py).
"""
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers import EXAMPLES, REPO
from helpers.launch import clean_env
from helpers.mpis import HYDRA
from helpers.multinode import BROADCAST, DUMP, SECRETS, job_summary
from helpers.procs import wait_for

pytestmark = [pytest.mark.multinode, pytest.mark.slow]

PROXIES = ("mpiexec.hydra", "hydra_pmi_proxy", "hydra_bstrap_proxy")


def _noport_config(th, tmp_path):
    """The fixture's ssh config minus ``Port 2222``: only --ssh-port can bring ssh there."""
    path = tmp_path / "ssh_config_noport"
    text = open(th.ssh_config).read()
    assert "Port 2222" in text
    path.write_text("".join(ln for ln in text.splitlines(True) if ln.strip() != "Port 2222"))
    return str(path)


def _ssh(th, tmp_path, port=True):
    return ["--ssh-args", f"-F {_noport_config(th, tmp_path)}"] + (["--ssh-port", str(th.port)] if port else [])


def _host1_argv(th, mpi, args, python=None):
    h1 = th.host(0)
    return ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns,
            python or mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun, *args]


def _run(th, mpi, args, env=None, timeout=120):
    return subprocess.run(_host1_argv(th, mpi, args), env=env or clean_env(), cwd=REPO, timeout=timeout,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True)


def _accepted(th):
    return [open(h.sshd_log, errors="replace").read().count("Accepted ") for h in th.hosts]


def _netns_of(pid):
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def _left(th, marker):
    """Every process of this job still alive on any test host: the ranks and adapters (their
    argv names the test's tmp dir) and Hydra's own (mpiexec, proxies) inside a host's netns."""
    hosts_ns = {os.stat(f"/run/netns/{h.netns}").st_ino for h in th.hosts}
    out = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = p.info["cmdline"] or []
            if any(marker in a for a in cmd) or (p.info["name"] in PROXIES and _netns_of(p.pid) in hosts_ns):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _descr(procs):
    out = []
    for p in procs:
        try:
            out.append((p.pid, p.name(), " ".join(p.cmdline())[:120]))
        except psutil.Error:
            pass
    return out


def _stop(launcher, th, marker):
    """Stop what this test started: the launcher, then its job's leftovers on the test hosts."""
    if launcher.poll() is None:
        launcher.terminate()
        try:
            launcher.wait(15)
        except subprocess.TimeoutExpired:
            launcher.kill()
            launcher.wait()
    for p in _left(th, marker):
        try:
            p.kill()
        except psutil.Error:
            pass


# --------------------------------------------------------------------------- identity, broadcast

@pytest.mark.parametrize("mpi", HYDRA)
def test_ranks_identity_and_exact_broadcast_across_three_hosts(testhosts, mpi, tmp_path):
    th = testhosts
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    env = clean_env(**BROADCAST)
    hf = th.hostfile(slots_per_host=2, n_hosts=3)    # Open MPI form: mpilaunch writes host:N
    before = _accepted(th)
    p = _run(th, mpi, ["--hostfile", hf, *_ssh(th, tmp_path), "--master_port", "38150",
                       "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path)], env)
    after = _accepted(th)
    assert p.returncode == 0, p.stdout + p.stderr
    h1 = th.hosts[0]
    for r in range(6):
        seen = json.load(open(tmp_path / f"rank{r}.json"))
        e, node = seen["env"], r // 2
        assert seen["hostname"] == th.hosts[node].hostname, (r, seen["hostname"])   # host:2 respected
        assert (e["RANK"], e["RANK_ID"], e["WORLD_SIZE"], e["LOCAL_RANK"]) == (str(r), str(r), "6", str(r % 2))
        assert e["PMI_RANK"] == str(r)
        assert e["GROUP_RANK"] == e["NODE_RANK"] == str(node), (r, e.get("GROUP_RANK"), e.get("NODE_RANK"))
        assert e["MS_SCHED_HOST"] == e["MASTER_ADDR"] == h1.addr, (r, e["MS_SCHED_HOST"], e["MASTER_ADDR"])
        assert (e["MS_SCHED_PORT"], e["MASTER_PORT"]) == ("38150", "38150")
        for name, value in BROADCAST.items():
            assert e.get(name) == value, (r, name, e.get(name))      # byte-exact, -genvlist
        assert e["PATH"] == env["PATH"]
    for secret in SECRETS:
        assert secret not in p.stdout + p.stderr
    # one login per remote host: the preflight's, whose control master Hydra's ssh reused
    assert [a - b for a, b in zip(after[1:], before[1:])] == [1, 1], (before, after)
    assert _left(th, str(tmp_path)) == []


@pytest.mark.parametrize("mpi", HYDRA)
def test_ssh_port_reaches_sshd_without_the_control_master(testhosts, mpi, tmp_path):
    """--no-preflight: no control master, so Hydra's own ssh must connect to port 2222; without
    --ssh-port the same launch fails (port 22 is closed): the port is what made it work."""
    th = testhosts
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    base = ["--hostfile", hf, "--no-preflight", "--no-scheduler", "--log_dir", str(tmp_path / "logs"),
            str(script), str(tmp_path)]
    before = _accepted(th)
    p = _run(th, mpi, [*_ssh(th, tmp_path), "--master_port", "38151", *base])
    after = _accepted(th)
    assert p.returncode == 0, p.stdout + p.stderr
    assert json.load(open(tmp_path / "rank1.json"))["hostname"] == th.hosts[1].hostname
    assert after[1] - before[1] == 1, (before, after)
    os.remove(tmp_path / "rank1.json")
    p = _run(th, mpi, [*_ssh(th, tmp_path, port=False), "--master_port", "38152", *base], timeout=60)
    assert p.returncode != 0 and not (tmp_path / "rank1.json").exists(), p.stdout + p.stderr
    assert wait_for(lambda: _left(th, str(tmp_path)) == [], 10), _descr(_left(th, str(tmp_path)))


# --------------------------------------------------------------------------- real training

# The ranks run this interpreter (--python: the Hydra venvs have no torch), whose mpi4py is Open
# MPI's: this works because the adapters need no MPI agreement here (hostfile of addresses,
# rank 0 on the launching host: node index from the launcher's plan).
@pytest.mark.parametrize("mpi", HYDRA)
def test_pytorch_ddp_gloo_across_two_hosts(testhosts, mpi, tmp_path):
    pytest.importorskip("torch")
    import compare_params

    th = testhosts
    out = tmp_path / "out"
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    p = _run(th, mpi, ["--python", sys.executable, "--hostfile", hf, *_ssh(th, tmp_path), "--no-scheduler",
                       "--master_port", "38153", "--log_dir", str(tmp_path / "logs"),
                       os.path.join(EXAMPLES, "torch_train.py"), "--steps", "5", "--out", str(out)],
             timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "TORCH_TRAIN_OK rank=0 size=2" in p.stdout and "TORCH_TRAIN_OK rank=1 size=2" in p.stdout
    ref = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_train.py"), "--reference",
                          "--world-size", "2", "--steps", "5", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    print(mpi.id, compare_params.check(str(out), 2, reference=True, steps=5))


# --------------------------------------------------------------------------- faults

def _start(th, mpi, tmp_path, hf, port, seconds="300"):
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    args = ["--hostfile", hf, *_ssh(th, tmp_path), "--master_port", port, "--no-scheduler",
            "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path), seconds]
    err = open(tmp_path / "launcher.err", "w")
    with open(tmp_path / "launcher.out", "w") as out:
        proc = subprocess.Popen(_host1_argv(th, mpi, args), env=clean_env(), cwd=REPO, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL)
    err.close()
    return proc


def _is_worker(p, tmp_path):
    cmd = p.info["cmdline"] or []
    return str(tmp_path / "dump.py") in cmd and not any("_boot.py" in a or "mpilaunch.rank" in a for a in cmd)


@pytest.mark.parametrize("mpi", HYDRA)
def test_remote_worker_sigkilled_ends_the_job_everywhere(testhosts, mpi, tmp_path):
    th = testhosts
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    launcher = _start(th, mpi, tmp_path, hf, "38154")
    took = None
    try:
        assert wait_for(lambda: all((tmp_path / f"rank{r}.json").exists() for r in range(3)), 60)
        ns2 = os.stat(f"/run/netns/{th.hosts[1].netns}").st_ino
        worker = [p for p in _left(th, str(tmp_path)) if _is_worker(p, tmp_path) and _netns_of(p.pid) == ns2]
        assert len(worker) == 1, _descr(worker)
        t0 = time.monotonic()
        worker[0].send_signal(signal.SIGKILL)
        launcher.wait(timeout=30)
        took = time.monotonic() - t0
        left = wait_for(lambda: _left(th, str(tmp_path)) == [], 15) or _left(th, str(tmp_path))
    finally:
        _stop(launcher, th, str(tmp_path))
    err = (tmp_path / "launcher.err").read_text()
    assert left is True, _descr(left)
    assert launcher.returncode == 137, err
    summary = job_summary(err)
    assert "root cause: rank 1 (worker)" in summary and th.hosts[1].hostname in summary, err
    assert took < 15, took


@pytest.mark.parametrize("how", ["crash", "link"])
@pytest.mark.parametrize("mpi", HYDRA)
def test_host_lost_mid_job_ends_it_everywhere(testhosts_healthy, mpi, how, tmp_path):
    """Neither MPI names the host (MPICH after a crash: 255 and "control_cb assert (!closed)
    failed"; after a link-down both wait forever on the stalled proxy): the launcher does. The
    preflight's ssh control master has a keepalive (~25-30 s), so the proxy's ssh ends; the
    launcher sees that, finds the host's ssh port silent, stops the job and names the host."""
    th = testhosts_healthy
    lost = th.hosts[2]
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    launcher = _start(th, mpi, tmp_path, hf, "38155" if how == "crash" else "38156")
    bound = 10 if how == "crash" else 40
    took = None
    try:
        assert wait_for(lambda: all((tmp_path / f"rank{r}.json").exists() for r in range(3)), 60)
        t0 = time.monotonic()
        (th.crash if how == "crash" else th.link_down)(lost)
        try:
            launcher.wait(timeout=bound + 5)
            took = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            pass
        lost_ns = os.stat(f"/run/netns/{lost.netns}").st_ino

        def reachable_left():
            return [p for p in _left(th, str(tmp_path)) if _netns_of(p.pid) != lost_ns]
        left = wait_for(lambda: reachable_left() == [], 15) or reachable_left()
    finally:
        if launcher.poll() is None:
            _stop(launcher, th, str(tmp_path))
        th.restore(lost)
    err = (tmp_path / "launcher.err").read_text()
    assert took is not None, f"still running {bound + 5}s after {lost.hostname} was lost ({how}):\n{err}"
    assert left is True, _descr(left)
    left = wait_for(lambda: _left(th, str(tmp_path)) == [], 20) or _left(th, str(tmp_path))
    assert left is True, _descr(left)
    print(f"{mpi.id} {how}: ended {took:.1f}s after the loss, status {launcher.returncode}")
    assert took < bound, took
    assert launcher.returncode != 0, err
    summary = job_summary(err)
    assert lost.hostname in summary or lost.addr in summary, err
