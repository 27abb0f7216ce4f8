"""Multi-node launches through mpilaunch across the namespace test hosts (real sshd, real mpirun).

The launcher runs inside host 1's namespaces (``testhosts.run_in``), as worker-0 does on a
platform: rank 0 lands there, so MS_SCHED_HOST / MASTER_ADDR must be host 1's 10.231.0.x
address. ssh reaches the other hosts through the fixture's ssh config (``--ssh-args "-F cfg"``,
port 2222). Both Open MPIs: 4.1 (/usr/bin/mpirun) and 5.0 (the wheel next to this Python).

Set MPILAUNCH_BENCH=1 to also measure a 2-host against a 1-host launch (median of 5).
"""
import json
import os
import statistics
import subprocess
import sys
import time

import psutil
import pytest

from helpers import EXAMPLES, REPO
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS, OMPI4_MPIRUN as OMPI4
from helpers.multinode import BROADCAST, DUMP, SECRETS, job_summary
from helpers.procs import wait_for

pytestmark = pytest.mark.multinode

MS_PYTHON = "/opt/mpilaunch/ms-venv/bin/python"
sys.path.insert(0, EXAMPLES)


def _in_host1(th, args, env, python=sys.executable, timeout=120):
    """`python -m mpilaunch ARGS` inside host 1 (its network and UTS namespaces)."""
    return th.run_in(0, [python, "-m", "mpilaunch", *args], timeout=timeout, env=env, cwd=REPO)


def _ssh(th):
    return ["--ssh-args", f"-F {th.ssh_config}"]


def _job_processes(*markers):
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            cmd = p.info["cmdline"] or []
            if any(m in a for m in markers for a in cmd):
                out.append(p)
        except psutil.Error:
            pass
    return out


# --------------------------------------------------------------------------- identity, broadcast

@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_ranks_identity_and_broadcast_across_three_hosts(testhosts, mpirun, tmp_path):
    th = testhosts
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    env = clean_env(**BROADCAST)
    hf = th.hostfile(slots_per_host=2, n_hosts=3)
    p = _in_host1(th, ["--mpirun", mpirun, "--hostfile", hf, *_ssh(th), "--master_port", "38130",
                       "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path)], env)
    assert p.returncode == 0, p.stdout + p.stderr
    h1 = th.hosts[0]
    for r in range(6):
        seen = json.load(open(tmp_path / f"rank{r}.json"))
        e, node = seen["env"], r // 2
        assert seen["hostname"] == th.hosts[node].hostname, (r, seen["hostname"])
        assert (e["RANK"], e["RANK_ID"], e["WORLD_SIZE"], e["LOCAL_RANK"]) == (str(r), str(r), "6", str(r % 2))
        assert e["GROUP_RANK"] == e["NODE_RANK"] == str(node), (r, e.get("GROUP_RANK"), e.get("NODE_RANK"))
        assert e["MS_SCHED_HOST"] == e["MASTER_ADDR"] == h1.addr, (r, e["MS_SCHED_HOST"], e["MASTER_ADDR"])
        assert (e["MS_SCHED_PORT"], e["MASTER_PORT"]) == ("38130", "38130")
        assert e["MS_ROLE"] == "MS_WORKER" and e["MS_WORKER_NUM"] == "6"
        for name, value in BROADCAST.items():
            assert e.get(name) == value, (r, name, e.get(name))
        assert e["PATH"] == env["PATH"]
    for secret in SECRETS:
        assert secret not in p.stdout + p.stderr
    # not a MindSpore script: no scheduler copy on rank 0 (docs/PROGRAMS.md, "the scheduler rule")
    assert sorted(n for n in os.listdir(tmp_path / "logs") if not n.startswith(".")) == ["events.jsonl"] + [f"worker_{r}.log" for r in range(6)]


# --------------------------------------------------------------------------- real training

@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_pytorch_ddp_gloo_across_two_hosts(testhosts, mpirun, tmp_path):
    pytest.importorskip("torch")
    import compare_params

    th = testhosts
    out = tmp_path / "out"
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    # The namespace hosts' names resolve nowhere, so gloo alone would fall back to loopback;
    # the adapter sets GLOO_SOCKET_IFNAME to the interface that routes to rank 0 (eth0 here).
    p = _in_host1(th, ["--mpirun", mpirun, "--hostfile", hf, *_ssh(th), "--no-scheduler",
                       "--master_port", "38131", "--log_dir", str(tmp_path / "logs"),
                       os.path.join(EXAMPLES, "torch_train.py"), "--steps", "5", "--out", str(out)],
                  clean_env(), timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "TORCH_TRAIN_OK rank=0 size=2" in p.stdout and "TORCH_TRAIN_OK rank=1 size=2" in p.stdout
    ref = subprocess.run([sys.executable, os.path.join(EXAMPLES, "torch_train.py"), "--reference",
                          "--world-size", "2", "--steps", "5", "--out", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert ref.returncode == 0, ref.stderr
    print(compare_params.check(str(out), 2, reference=True, steps=5))


@pytest.mark.parametrize("which", ["ompi5", "ompi4"])
def test_mindspore_cpu_across_two_hosts(testhosts, which, tmp_path):
    if not os.access(MS_PYTHON, os.X_OK):
        pytest.skip(f"MindSpore venv absent ({MS_PYTHON}); run scripts/setup_mindspore.sh")
    # Open MPI 5: the wheel inside the MindSpore venv (the default next to that python)
    mpirun = os.path.join(os.path.dirname(MS_PYTHON), "mpirun") if which == "ompi5" else OMPI4
    if not os.access(mpirun, os.X_OK):
        pytest.skip(f"{mpirun} not installed")
    import compare_params

    th = testhosts
    out = tmp_path / "out"
    hf = th.hostfile(slots_per_host=1, n_hosts=2)
    p = _in_host1(th, ["--python", MS_PYTHON, "--mpirun", mpirun, "--hostfile", hf, *_ssh(th),
                       "--master_port", "38132",
                       "--cluster_time_out", "90", "--log_dir", str(tmp_path / "logs"),
                       os.path.join(EXAMPLES, "ms_train.py"), "--steps", "3", "--out", str(out)],
                  clean_env(), python=MS_PYTHON, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "MS_TRAIN_OK rank=0 size=2" in p.stdout and "MS_TRAIN_OK rank=1 size=2" in p.stdout
    assert "scheduler.log" in os.listdir(tmp_path / "logs")
    ref = subprocess.run([MS_PYTHON, os.path.join(EXAMPLES, "ms_train.py"), "--reference",
                          "--world-size", "2", "--steps", "3", "--out", str(out)],
                         capture_output=True, text=True, timeout=180)
    assert ref.returncode == 0, ref.stderr
    print(compare_params.check(str(out), 2, reference=True, steps=3, tol=1e-5))


# --------------------------------------------------------------------------- faults

def _netns_inode(netns):
    return os.stat(f"/run/netns/{netns}").st_ino


def _outside(procs, netns):
    """The processes not inside the given host's network namespace."""
    ino, out = _netns_inode(netns), []
    for p in procs:
        try:
            if os.stat(f"/proc/{p.pid}/ns/net").st_ino != ino:
                out.append(p)
        except OSError:
            pass
    return out


@pytest.mark.parametrize("how", ["crash", "link"])
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_host_lost_mid_job_ends_it_everywhere(testhosts_healthy, mpirun, how, tmp_path):
    """crash: sshd, MPI daemon and ranks of host 3 die at once (power loss).
    link: host 3's cable is pulled (packets lost; nothing there can be reached or killed until
    the link is back)."""
    th = testhosts_healthy
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    lost = th.hosts[2]
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    h1 = th.host(0)
    cmd = ["nsenter", "-t", str(h1.sshd_pid), "-u", "--", "ip", "netns", "exec", h1.netns, sys.executable,
           "-m", "mpilaunch", "--mpirun", mpirun, "--hostfile", hf, *_ssh(th), "--master_port", "38133",
           "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path), "300"]
    err_path = tmp_path / "launcher.err"
    with open(tmp_path / "launcher.out", "w") as out, open(err_path, "w") as errf:
        launcher = subprocess.Popen(cmd, env=clean_env(), stdout=out, stderr=errf, stdin=subprocess.DEVNULL,
                                    cwd=REPO)
    bound = 10 if how == "crash" else 40
    took = None
    try:
        assert wait_for(lambda: all((tmp_path / f"rank{r}.json").exists() for r in range(3)), 60)
        t0 = time.monotonic()
        if how == "crash":
            th.crash(lost)
        else:
            th.link_down(lost)
        try:
            launcher.wait(timeout=bound + 5)
            took = time.monotonic() - t0
        except subprocess.TimeoutExpired:
            pass
        # the reachable hosts are clean at once
        left = wait_for(lambda: not _outside(_job_processes(str(tmp_path)), lost.netns), 15) or \
            _outside(_job_processes(str(tmp_path)), lost.netns)
    finally:
        if launcher.poll() is None:     # stop what we started: the launcher, then its leftovers
            family = [launcher] + [psutil.Process(p.pid) for p in psutil.Process(launcher.pid).children(True)]
            launcher.terminate()
            try:
                launcher.wait(15)
            except subprocess.TimeoutExpired:
                pass
            for p in family:
                try:
                    p.kill()
                except (psutil.Error, ProcessLookupError):
                    pass
            launcher.wait()
        th.restore(lost)
    err = err_path.read_text()
    assert took is not None, f"the job was still running {bound + 5}s after host {lost.hostname} was lost ({how})"
    assert left is True, [p.info["cmdline"] for p in left]
    # and, once it can be reached again, so is the lost host
    left = wait_for(lambda: not _job_processes(str(tmp_path)), 20) or _job_processes(str(tmp_path))
    assert left is True, [p.info["cmdline"] for p in left]
    assert took < bound, took
    assert launcher.returncode != 0, f"job reported success after losing {lost.hostname}:\n{err}"
    summary = job_summary(err)
    assert lost.hostname in summary or lost.addr in summary, err


def test_host_that_never_answers_fails_preflight_within_its_time_out(testhosts_healthy):
    th = testhosts_healthy
    gone = th.hosts[1]
    hf = th.hostfile(slots_per_host=1, n_hosts=3)
    with th.host_lost(gone, "link"):
        t0 = time.monotonic()
        p = th.run_in(0, [sys.executable, "-m", "mpilaunch", "check", "--hostfile", hf, *_ssh(th),
                          "--timeout", "3"], timeout=60, env=clean_env())
        took = time.monotonic() - t0
    assert p.returncode == 1, p.stdout + p.stderr
    fails = [ln for ln in p.stdout.splitlines() if ln.startswith("FAIL ")]
    assert len(fails) == 1, p.stdout
    assert fails[0].startswith(f"FAIL {gone.addr}: ")
    assert "ssh port 2222" in fails[0] and ("no answer" in fails[0] or "unreachable" in fails[0])
    assert took < 3 * 2 + 4, took


# --------------------------------------------------------------------------- measurement

@pytest.mark.skipif(os.environ.get("MPILAUNCH_BENCH") != "1", reason="set MPILAUNCH_BENCH=1 to measure")
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_measure_two_host_against_one_host_launch(testhosts, mpirun, tmp_path):
    th = testhosts
    one = tmp_path / "one-host"
    one.write_text(f"{th.hosts[0].addr} slots=2\n")
    two = th.hostfile(slots_per_host=1, n_hosts=2)
    hello = os.path.join(EXAMPLES, "hello.py")
    figures = {}
    for name, hf in (("1-host", str(one)), ("2-host", two)):
        times = []
        for _ in range(5):
            args = ["--mpirun", mpirun, "--hostfile", hf, *_ssh(th), "-np", "2", "--no-scheduler",
                    "--log_dir", str(tmp_path / "logs"), hello]
            t0 = time.monotonic()
            p = _in_host1(th, args, clean_env())
            times.append(time.monotonic() - t0)
            assert p.returncode == 0, p.stderr
        figures[name] = statistics.median(times)
    line = (f"Open MPI {th.mpi_major(mpirun)}.x ({mpirun}): 1-host {figures['1-host']:.2f}s, 2-host {figures['2-host']:.2f}s "
            f"(+{figures['2-host'] - figures['1-host']:.2f}s), median of 5; command: "
            f"ip netns exec <host1> {sys.executable} -m mpilaunch --mpirun {mpirun} --hostfile H "
            f"--ssh-args '-F cfg' -np 2 --no-scheduler examples/hello.py")
    print(line)
    with open(os.path.join(os.environ.get("MPILAUNCH_BENCH_OUT", "/tmp"), "mpilaunch-multinode-bench.txt"),
              "a") as fh:
        fh.write(line + "\n")
