"""The live monitor, rank side (mpilaunch/rank/monitor.py) and its samples' trip over the control
channel. Pure parts on py-spy's real output (tests/rank/data/monitor/: ``py-spy record --threads
--idle --nonblocking --format raw`` of the ranks of slow.py, a 4-rank torch/gloo job whose rank 2
sleeps 40 ms in load_batch, and of mpi_slow.py, 3 mpi4py ranks whose rank 1 does, the scripts
kept as .txt; and what py-spy printed when the kernel refused it a process). Then real processes: the channel
carrying a sample; adapters under a real mpirun whose samples name the slow rank by its wait
share; an adapter without py-spy; none leaves a py-spy running."""
import os
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.mpis import OMPI5
from helpers.ports import free_port
from helpers.procs import wait_for
from mpilaunch.contract import STATUS_PREFIX
from mpilaunch.monitor.model import Sample
from mpilaunch.rank import control, monitor
from mpilaunch.supervise.control import Control

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "monitor")


def _text(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def _fixture_source(name):
    """``read(path, line)`` for the captured scripts: their copies here (NAME.txt), not where
    they ran (/tmp/mon/)."""
    lines = _text(name + ".txt").splitlines()
    return lambda path, line: lines[line - 1].strip() if path.endswith("/" + name) else ""


@pytest.mark.parametrize("name, tid, expected", [
    # the slow rank: 35 samples asleep in load_batch, 12 computing, 32 in all_reduce, of 79
    ("torch_rank2.raw", 8452, (32 / 79, "slow.py:15 in load_batch", 79)),
    # a waiting rank: 35 of 39 in all_reduce, the rest in compute
    ("torch_rank0.raw", 29952, (35 / 39, "slow.py:21 in compute", 39)),
    ("torch_rank0.raw", 1, (None, None, 0)),      # another thread's: none
])
def test_torch_samples_give_the_wait_share_and_the_hot_frame(name, tid, expected):
    assert monitor.summarize(monitor.parse_raw(_text(name), tid)) == expected


@pytest.mark.parametrize("name, tid, expected", [
    # mpi4py's allreduce has no Python frame: the user's line that calls it is the collective
    ("mpi_rank0.raw", 12214, (37 / 39, "mpi_slow.py:12 in load_batch", 39)),
    ("mpi_rank1.raw", 12245, (14 / 39, "mpi_slow.py:11 in load_batch", 39)),
])
def test_mpi4py_samples_read_the_users_line(name, tid, expected):
    stacks = monitor.parse_raw(_text(name), tid)
    assert monitor.summarize(stacks, read=_fixture_source("mpi_slow.py")) == expected
    # without the source line nothing tells the call apart: no wait at all
    assert monitor.summarize(stacks, read=lambda path, line: "")[0] == 0.0


def test_the_raw_format_is_parsed_frame_by_frame():
    text = ("thread (7): MainThread;<module> (/w/t.py:9);step (/w/t.py:3) 4\n"
            "thread (8): Thread-1;run (/usr/lib/python3.11/threading.py:975) 6\n"
            "thread (7): MainThread;native_thing (libfoo.so) 2\n"
            "garbled line\n")
    assert monitor.parse_raw(text, 7) == [
        ([("step", "/w/t.py", 3), ("<module>", "/w/t.py", 9)], 4),
        ([("native_thing", "libfoo.so", 0)], 2)]
    assert monitor.summarize(monitor.parse_raw(text, 7)) == (0.0, "t.py:3 in step", 6)


def test_the_kernels_refusal_is_named_from_py_spys_own_words():
    for name in ("py_spy_other_user.txt", "py_spy_no_cap.txt"):
        assert monitor.refused(_text(name)).startswith("py-spy may not read the worker here "
                                                        "(ptrace refused: Permission ")
    assert monitor.refused("Error: Failed to find python version from target process") is None
    assert monitor.first_error(_text("py_spy_no_cap.txt")) == (
        "Error: Failed to get process executable name. Check that the process is running.")


def test_usage_and_output_of_a_real_process_tree(tmp_path):
    log = tmp_path / "w.log"
    code = ("import subprocess, sys, time; b = bytearray(64 << 20); "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print('up', flush=True); time.sleep(60)")
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out)
    try:
        assert monitor.output_time(str(log)) is None or log.stat().st_size
        assert wait_for(lambda: log.stat().st_size and len(psutil.Process(proc.pid).children()) == 1, 30)
        cpu, rss = monitor.usage(proc.pid)
        kid = psutil.Process(proc.pid).children()[0]
        both = psutil.Process(proc.pid).memory_info().rss + kid.memory_info().rss
        assert rss >= 64 << 20 and abs(rss - both) < 8 << 20
        assert 0 < cpu < 60
        assert monitor.output_time(str(log)) == log.stat().st_mtime
    finally:
        for p in psutil.Process(proc.pid).children() + [psutil.Process(proc.pid)]:
            p.kill()
        proc.wait()
    assert monitor.usage(proc.pid) is None
    assert monitor.output_time(str(tmp_path / "none.log")) is None


def _sample(**kw):
    base = dict(rank=3, role="worker", pid=42, t=1.5, cpu_s=2.0, rss=3, output_t=None,
                wait_share=0.25, hot_frame="t.py:3 in step", stack_samples=8)
    return Sample(**{**base, **kw})


def test_a_sample_crosses_the_channel_with_the_host_of_the_hello():
    got, bad = [], []

    def consume(sample):
        if sample.rank == 3 and sample.pid == 13:
            raise RuntimeError("a consumer's bug")
        got.append(sample)
    ctl = Control([], on_sample=consume)
    try:
        link = control.Link((ctl.env[control.ENDPOINT_VAR], ctl.token), 3, lambda: None, bad.append)
        link.start()
        assert link.connected.wait(10), bad
        conn, nonce = ctl.peers[3]
        assert link.send_sample(_sample(pid=13).to_wire())    # the consumer fails: said, goes on
        data = _sample().to_wire()
        link.send(f"sample {len(data)} {'0' * 64}\n".encode() + data)   # forged: dropped
        big = _sample(hot_frame="x" * 100000).to_wire()                # longer than one recv
        assert link.send_sample(big) and link.send_sample(data)
        assert wait_for(lambda: len(got) == 2, 10), got
        host = os.uname().nodename
        assert got == [_sample(hot_frame="x" * 100000, host=host), _sample(host=host)]
    finally:
        ctl.close()
    assert wait_for(lambda: not link.send_sample(data), 10)    # the launcher's end has closed


# A torch/gloo job whose rank 2 sleeps 40 ms in load_batch each step; it runs until OUT/release
# exists (rank 0 says so to every rank in the step's all_reduce).
JOB = r'''
import datetime, os, sys, time
import torch
import torch.distributed as dist
out = sys.argv[1]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))
torch.set_num_threads(1)
w = torch.randn(128, 128)


def load_batch():
    if rank == 2:
        time.sleep(0.04)
    return torch.randn(32, 128)


def train():
    open(os.path.join(out, f"up_{rank}"), "w").close()
    while True:
        x = load_batch()
        for _ in range(8):
            x = torch.tanh(x @ w)
        stop = float(rank == 0 and os.path.exists(os.path.join(out, "release")))
        g = torch.cat([x.sum(0), torch.tensor([stop])])
        dist.all_reduce(g)
        if g[-1].item() > 0:
            return


train()
dist.destroy_process_group()
'''
SLEEP_LINE = JOB.splitlines().index("        time.sleep(0.04)")   # 1-based: the line before


needs_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def _py_spies():
    out = []
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] == "py-spy" and "record" in (p.info["cmdline"] or []):
            out.append(p)
    return out


def _adapters(tmp_path, interval, script, port=0):
    return [sys.executable, "-m", "mpilaunch.rank", "--log-dir", str(tmp_path / "logs"),
            "--tail-worker-log", "none", "--master-port", str(port), "--no-scheduler",
            "--monitor-interval", str(interval), "--", str(script), str(tmp_path)]


@needs_torch
@pytest.mark.skipif(OMPI5.missing() is not None, reason=str(OMPI5.missing()))
def test_a_slow_ranks_samples_wait_least_and_name_its_frame(tmp_path):
    """4 adapters under a real mpirun, sampling every 4 s, their samples received by a
    test-side control listener: rank 2 waits least, in load_batch; the job ends with no
    py-spy left running."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    got = []
    ctl = Control([], np=4, on_sample=got.append)
    env = dict(os.environ, **ctl.env, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    argv = [OMPI5.mpirun, "-np", "4", "--oversubscribe", "-x", control.ENDPOINT_VAR, "-x",
            control.TOKEN_VAR, "-x", "OMP_NUM_THREADS", *_adapters(tmp_path, 4, script)]
    before = {p.pid for p in _py_spies()}
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    training = []      # when every rank was in its loop: the samples of stacks taken after

    def stacked(rank):
        return [s for s in got if s.rank == rank and s.stack_samples >= 5
                and s.t > training[0] + 4 + 1]    # the record began after (an interval on)

    try:
        assert wait_for(lambda: all((tmp_path / f"up_{r}").exists() for r in range(4)), 600)
        training.append(time.time())
        assert wait_for(lambda: all(len(stacked(r)) >= 3 for r in range(4)), 300), got
    finally:
        released = time.time()
        (tmp_path / "release").touch()
        out, err = proc.communicate(timeout=300)
        ctl.close()
    assert proc.returncode == 0, err
    shares = {r: sorted(s.wait_share for s in stacked(r)) for r in range(4)}
    median = {r: v[len(v) // 2] for r, v in shares.items()}
    assert all(median[2] + 0.2 < median[r] for r in (0, 1, 3)), shares
    hot = [s.hot_frame for s in stacked(2)]
    assert max(set(hot), key=hot.count) == f"job.py:{SLEEP_LINE + 1} in load_batch", hot
    host = os.uname().nodename
    for s in [s for s in got if s.t < released]:
        assert (s.role, s.host, s.sampler) == ("worker", host, "py-spy")
        assert s.cpu_s > 0 and s.rss > 10 << 20
        assert s.wait_share is None or 0 <= s.wait_share <= 1
    # the monitor ended with the job: none of its py-spy is left
    assert wait_for(lambda: not [p for p in _py_spies() if p.pid not in before], 10)
    assert "mpilaunch.rank: the monitor" not in err


def test_without_py_spy_samples_go_on_and_rank_0_says_so_once(tmp_path):
    """One adapter alone (rank 0 of 1, no mpirun), its Python (a link to this one) with no
    py-spy beside it and none on PATH: CPU, memory and output in every sample, one line."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    os.symlink(sys.executable, bindir / "python3")
    script = tmp_path / "w.py"
    script.write_text("import os, sys, time\nprint('hi', flush=True)\n"
                      "while not os.path.exists(os.path.join(sys.argv[1], 'release')):\n"
                      "    time.sleep(0.05)\n")
    got = []
    ctl = Control([], np=1, on_sample=got.append)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": REPO, **ctl.env,
           "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
    argv = [str(bindir / "python3")] + _adapters(tmp_path, 1, script, free_port())[1:]
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: len([s for s in got if s.output_t]) >= 2, 60), got
    finally:
        (tmp_path / "release").touch()
        out, err = proc.communicate(timeout=60)
        ctl.close()
    assert proc.returncode == 0, err
    why = monitor.NO_PY_SPY
    said = [line for line in err.splitlines() if not line.startswith(STATUS_PREFIX)]   # not status lines
    assert said == [f"mpilaunch.rank: the monitor samples CPU, memory and output only: {why}"]
    log = tmp_path / "logs" / "worker_0.log"
    for s in got:
        assert (s.rank, s.role, s.sampler, s.wait_share, s.hot_frame, s.stack_samples) == (
            0, "worker", f"none: {why}", None, None, 0)
        assert s.rss > 1 << 20 and s.cpu_s >= 0
    assert got[-1].output_t == log.stat().st_mtime
    assert time.time() - 120 < got[-1].t <= time.time()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/capsh"),
                    reason="needs root and capsh (libcap2-bin) to drop CAP_SYS_PTRACE")
def test_a_refused_py_spy_leaves_cpu_memory_and_output_and_one_line(tmp_path):
    """As in a container without CAP_SYS_PTRACE: the adapter runs without it (capsh), and its
    worker makes itself undumpable (PR_SET_DUMPABLE 0), which only that capability may read.
    The kernel refuses py-spy; the samples go on without stacks, rank 0 says why once."""
    script = tmp_path / "w.py"
    script.write_text("import ctypes, os, sys, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n"
                      "print('hi', flush=True)\n"
                      "while not os.path.exists(os.path.join(sys.argv[1], 'release')):\n"
                      "    time.sleep(0.05)\n")
    got = []
    ctl = Control([], np=1, on_sample=got.append)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": REPO, **ctl.env,
           "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1",
           "OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "1"}
    argv = ["/usr/sbin/capsh", "--drop=cap_sys_ptrace", "--", "-c", 'exec "$0" "$@"',
            *_adapters(tmp_path, 2, script, free_port())]
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    refused = ("none: py-spy may not read the worker here (ptrace refused: Permission denied; "
               "docs/MONITOR.md)")
    try:
        assert wait_for(lambda: len([s for s in got if s.sampler == refused]) >= 2, 120), got
    finally:
        (tmp_path / "release").touch()
        out, err = proc.communicate(timeout=60)
        ctl.close()
    assert proc.returncode == 0, err
    said = [line for line in err.splitlines() if not line.startswith(STATUS_PREFIX)]
    assert said == ["mpilaunch.rank: the monitor samples CPU, memory and output only: "
                    + refused[len("none: "):]]
    # before the first record a sample has no stacks yet; after the refusal, none ever
    first = next(i for i, s in enumerate(got) if s.sampler == refused)
    assert all(s.sampler == refused for s in got[first:])
    assert all((s.wait_share, s.stack_samples) == (None, 0) and s.rss > 1 << 20 for s in got)
    assert got[-1].output_t is not None
    worker = str(got[0].pid)
    assert wait_for(lambda: not [p for p in _py_spies() if worker in (p.info["cmdline"] or [])], 10)
