"""The rank adapter under REAL mpirun: Open MPI 5 (next to the interpreter) and 4.1
(/usr/bin/mpirun, skipped if missing). Ports 28100-28139."""
import os
import signal
import socket
import subprocess
import threading
import time

import psutil
import pytest

from helpers import REPO
from helpers.adapter import adapter_cmd, infos, status_lines, write_worker
from helpers.hosts.proc import drop_session_dirs
from helpers.mpis import OMPI4_MPIRUN, OMPI5_MPIRUN
from helpers.procs import kill_leftovers, pid_alive as alive, wait_for

MPIRUNS = {          # the first of the ports each uses
    "ompi5": (OMPI5_MPIRUN, 28100),
    "ompi41": (OMPI4_MPIRUN, 28120),
}


@pytest.fixture(params=sorted(MPIRUNS))
def mpi(request):
    path, port_base = MPIRUNS[request.param]
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not installed")
    return path, port_base


class Job:
    """mpirun + adapter; records every descendant seen while it runs."""

    def __init__(self, mpirun, np, tmp_path, *opts, port, env_extra=None, mpirun_opts=()):
        self.script, self.out = write_worker(tmp_path)
        self.logs = str(tmp_path / "logs")
        env = dict(os.environ, PYTHONPATH=REPO, T_DIR=self.out,
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        env.update(env_extra or {})
        xs = []
        for name in sorted(env):
            if name == "PYTHONPATH" or name.startswith("T_"):
                xs += ["-x", name]
        self.cmd = [mpirun, "-np", str(np), "--oversubscribe", "--bind-to", "none", *xs,
                    *mpirun_opts] + adapter_cmd(
            "--log-dir", self.logs, "--master-port", str(port), *opts, script=self.script)
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(self.cmd, env=env, cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        self.seen = {}
        self._watch = threading.Thread(target=self._record, daemon=True)
        self._watch.start()

    def _record(self):
        try:
            root = psutil.Process(self.p.pid)
        except psutil.Error:
            return
        while self.p.poll() is None:
            try:
                for c in root.children(recursive=True):
                    self.seen.setdefault(c.pid, c)
            except psutil.Error:
                pass
            time.sleep(0.05)

    def adapters(self):
        """{rank: psutil.Process} of the adapters (children of mpirun/orted running us)."""
        res = {}
        for proc in list(self.seen.values()):
            try:
                if "mpilaunch.rank" in proc.cmdline():
                    res[int(proc.environ()["OMPI_COMM_WORLD_RANK"])] = proc
            except (psutil.Error, KeyError, ValueError):
                pass
        return res

    def wait(self, timeout=45):
        try:
            self.stdout, self.stderr = self.p.communicate(timeout=timeout)
        finally:
            self.elapsed = time.monotonic() - self.t0
        self._watch.join(2)
        return self.p.returncode

    def leftovers(self, grace=5.0):
        wait_for(lambda: not any(alive(pid) for pid in self.seen), timeout=grace)
        return [pid for pid in self.seen if alive(pid)]

    def cleanup(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.communicate()
        kill_leftovers(self.seen.values())
        # an mpirun killed by a signal (test_mpirun_signalled_everything_gone[KILL]) leaves its
        # session dir, which would stop a later mpirun given the same pid (exit 213)
        wait_for(lambda: not any(alive(pid) for pid in self.seen), timeout=5)
        drop_session_dirs([self.p.pid, *self.seen])


@pytest.fixture
def jobs():
    started = []
    yield started
    for j in started:
        j.cleanup()


OURS = ("MS_ROLE", "MS_WORKER_NUM", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_NODE_ID",
        "MS_TOPO_TIMEOUT", "RANK_ID", "RANK_SIZE", "DEVICE_ID", "MASTER_ADDR", "MASTER_PORT",
        "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def test_env_logs_tail_and_scheduler(mpi, tmp_path, jobs):
    mpirun, base = mpi
    port = base
    j = Job(mpirun, 2, tmp_path, "--tail-worker-log", "1", "--cluster-time-out", "77",
            "--worker-log-name", "w_{hostname}_{rank}.log", port=port,
            env_extra={"T_WORKER": "await:sched_0;print:hello;err:to-stderr", "RANK": "9",
                       "MS_ENABLE_RECOVERY": "1", "MS_RECOVERY_PATH": "/tmp/rec"},
            mpirun_opts=["-x", "RANK", "-x", "MS_ENABLE_RECOVERY", "-x", "MS_RECOVERY_PATH"])
    jobs.append(j)
    assert j.wait() == 0, j.stderr
    got = infos(j.out)
    assert set(got) == {"worker_0", "worker_1", "sched_0"}      # scheduler only on rank 0
    for r in (0, 1):
        env = got[f"worker_{r}"]["env"]
        assert {k: env.get(k) for k in OURS} == {
            "MS_ROLE": "MS_WORKER", "MS_WORKER_NUM": "2", "MS_SCHED_HOST": "127.0.0.1",
            "MS_SCHED_PORT": str(port), "MS_NODE_ID": str(r), "MS_TOPO_TIMEOUT": "77",
            "RANK_ID": str(r), "RANK_SIZE": "2", "DEVICE_ID": str(r),
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
            "WORLD_SIZE": "2", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "0", "NODE_RANK": "0"}
        assert (env["MS_ENABLE_RECOVERY"], env["MS_RECOVERY_PATH"]) == ("1", "/tmp/rec")
    sched = got["sched_0"]["env"]
    assert sched["MS_ROLE"] == "MS_SCHED" and "MS_NODE_ID" not in sched
    assert sched["MS_SCHED_PORT"] == str(port) and sched["MS_WORKER_NUM"] == "2"
    host = socket.gethostname()
    assert sorted(n for n in os.listdir(j.logs) if not n.startswith(".")) == sorted(
        ["scheduler.log", f"w_{host}_0.log", f"w_{host}_1.log"])
    for r in (0, 1):
        text = open(os.path.join(j.logs, f"w_{host}_{r}.log")).read()
        assert "hello\n" in text and "to-stderr\n" in text
    # only rank 1 is tailed, each line prefixed
    assert "[rank1] hello" in j.stdout and "[rank1] to-stderr" in j.stdout
    assert "[rank0]" not in j.stdout
    assert status_lines(j.stderr) == []


def test_port_zero_is_agreed_through_mpi(mpi, tmp_path, jobs):
    mpirun, _ = mpi
    j = Job(mpirun, 2, tmp_path, "--no-scheduler", port=0)
    jobs.append(j)
    assert j.wait() == 0, j.stderr
    got = infos(j.out)
    ports = {got[f"worker_{r}"]["env"]["MS_SCHED_PORT"] for r in (0, 1)}
    assert len(ports) == 1 and ports != {"0"}
    assert {got[f"worker_{r}"]["env"]["MASTER_PORT"] for r in (0, 1)} == ports
    # the adapter's own MPI tuning does not reach the workers
    assert got["worker_0"]["env"].get("OMPI_MCA_btl") == os.environ.get("OMPI_MCA_btl")


@pytest.mark.parametrize("with_mpi", [False, True], ids=["fixed-port", "port0-mpi"])
def test_exit_status_propagates(mpi, tmp_path, jobs, with_mpi):
    # port 0 makes the adapters initialise and finalise MPI first: a rank failing after
    # MPI_Finalize must still end the job within seconds (not wait ~62 s in Finalize)
    mpirun, base = mpi
    j = Job(mpirun, 2, tmp_path, port=0 if with_mpi else base + 2,
            env_extra={"T_WORKER_1": "waitfile:2;err:boom;exit:3", "T_WORKER_0": "sleep:60",
                       "T_SCHED": "sleep:60"})
    jobs.append(j)
    assert j.wait() == 3
    assert j.elapsed < 15
    first = [l for l in status_lines(j.stderr) if l["cause"] == "self"]
    assert [(l["rank"], l["role"], l["code"]) for l in first] == [(1, "worker", 3)]
    assert first[0]["tail"] == ["boom"]
    assert first[0]["log"] == os.path.join(j.logs, "worker_1.log")
    assert j.leftovers() == []


def test_sigkilled_worker_ends_4_rank_job(mpi, tmp_path, jobs):
    mpirun, base = mpi
    j = Job(mpirun, 4, tmp_path, port=base + 3,
            env_extra={"T_WORKER_2": "waitfile:4;await:sched_0;kill:9", "T_WORKER": "sleep:60",
                       "T_SCHED": "sleep:60"})
    jobs.append(j)
    assert wait_for(lambda: os.path.exists(os.path.join(j.out, "info_worker_2.json")), 30)
    killed_at = time.monotonic()
    assert j.wait() == 137
    took = time.monotonic() - killed_at
    print(f"\n{mpirun}: 4-rank job ended {took:.1f}s after the worker SIGKILL")
    assert took < 30
    self_lines = [l for l in status_lines(j.stderr) if l["cause"] == "self"]
    assert self_lines and (self_lines[0]["rank"], self_lines[0]["signal"]) == (2, 9)
    pids = [i["pid"] for i in infos(j.out).values()]
    assert len(pids) == 5                                  # 4 workers + scheduler
    assert j.leftovers() == []


def test_adapter_sigkilled_its_children_die(mpi, tmp_path, jobs):
    mpirun, base = mpi
    j = Job(mpirun, 2, tmp_path, port=base + 4,
            env_extra={"T_WORKER": "sleep:60", "T_SCHED": "sleep:60"})
    jobs.append(j)
    assert wait_for(lambda: len(infos(j.out)) == 3, 30)
    adapters = wait_for(lambda: (lambda a: a if len(a) == 2 else None)(j.adapters()), 10)
    assert adapters, "adapters not found"
    children0 = [i["pid"] for k, i in infos(j.out).items() if k.endswith("_0")]
    assert len(children0) == 2                              # worker + scheduler of rank 0
    adapters[0].kill()
    assert wait_for(lambda: not any(alive(p) for p in children0), timeout=5), \
        "PDEATHSIG did not end rank 0's children"
    j.wait()
    assert j.leftovers() == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_mpirun_signalled_everything_gone(mpi, tmp_path, jobs, sig):
    mpirun, base = mpi
    j = Job(mpirun, 2, tmp_path, port=base + 5 + (sig == signal.SIGKILL),
            env_extra={"T_WORKER": "child;sleep:60", "T_SCHED": "sleep:60"})
    jobs.append(j)
    assert wait_for(lambda: len(infos(j.out)) == 3 and len(
        [n for n in os.listdir(j.out) if n.startswith("grandchild_")]) == 2, 30)

    def everyone_seen():
        try:
            gcs = [int(open(os.path.join(j.out, n)).read()) for n in os.listdir(j.out)
                   if n.startswith("grandchild_")]
        except ValueError:                               # a pid file still being written
            return False
        return all(pid in j.seen for pid in gcs + [i["pid"] for i in infos(j.out).values()])

    # the watcher must have seen everyone, or the leftover check below would not cover them
    # (was: a fixed 0.3 s, a guess on a loaded machine)
    assert wait_for(everyone_seen, 10), sorted(j.seen)
    j.p.send_signal(sig)
    j.wait()
    assert j.leftovers(grace=10) == []


def test_port_in_use_on_rank0(mpi, tmp_path, jobs):
    mpirun, base = mpi
    port = base + 7
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    try:
        j = Job(mpirun, 2, tmp_path, port=port)
        jobs.append(j)
        rc = j.wait()
    finally:
        s.close()
    assert rc == 2
    assert j.elapsed < 15
    msgs = [l for l in j.stderr.splitlines() if l.startswith("mpilaunch.rank: error:")]
    assert msgs == [f"mpilaunch.rank: error: --master-port {port} is already in use on host "
                    f"{socket.gethostname()} (rank 0, scheduler address 127.0.0.1); pick "
                    f"another port or use --master-port 0"]
    # rank 0 started nothing; rank 1 (single node, fixed port: no MPI, no waiting for rank
    # 0's check) may have started its worker, which the teardown ended
    assert not {"worker_0", "sched_0"} & set(infos(j.out))
    self_lines = [l for l in status_lines(j.stderr) if l["cause"] == "self"]
    assert [(l["rank"], l["role"], l["code"]) for l in self_lines] == [(0, "adapter", 2)]
    assert j.leftovers() == []
