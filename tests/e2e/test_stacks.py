"""``mpilaunch stacks LOG_DIR`` on a running job (docs/HANGS.md): a 4-rank torch/gloo job whose
rank 2 waits (in load_batch) before its all_reduce while the others block in it. The command,
from a second process, names rank 2 and its frame; the job goes on and completes once the test
releases rank 2. Open MPI 5, 4.1, MPICH and Intel MPI (their mpiexec, this interpreter's torch);
without py-spy on the ranks' PATH, one line names the extra; a finished job's log dir and an
--exec job are one line each, exit 2."""
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO, mpis
from helpers.launch import clean_env, mpilaunch_argv
from helpers.frameworks import MS_PY, needs_ms
from helpers.mpis import ALL
from helpers.ports import free_port
from helpers.procs import alive, descendants, wait_for

STUCK = r'''
import datetime, os, pathlib, sys, threading, time
beating = threading.Event()     # the stall watchdog's progress until this rank is where it waits


def beat():
    hb = os.environ.get("MPILAUNCH_HEARTBEAT_FILE")
    while hb and not beating.wait(0.2):
        pathlib.Path(hb).touch()


threading.Thread(target=beat, daemon=True).start()
import torch
import torch.distributed as dist

rank = int(os.environ["RANK"])
out = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(hours=1))


def load_batch(step):
    if rank == 2 and step == 3:
        beating.set()
        open(os.path.join(out, "stuck"), "w").close()
        while not os.path.exists(os.path.join(out, "release")):
            time.sleep(0.05)
    return torch.ones(4)


def train():
    for step in range(6):
        x = load_batch(step)
        if step == 3:
            beating.set()
            open(os.path.join(out, f"at3_{rank}"), "w").close()
        dist.all_reduce(x)
    open(os.path.join(out, f"done_{rank}"), "w").close()


train()
dist.destroy_process_group()
'''
# rank 2's sleep while it waits for the release
LINE = f"stuck.py:{STUCK.splitlines().index('            time.sleep(0.05)') + 1} in load_batch"

needs_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def start(tmp_path, *launch, env=None):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    argv = mpilaunch_argv(*launch, "-np", "4", "--oversubscribe", "--no-scheduler",
                          "--master_port", "0", "--python", sys.executable,
                          "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path))
    return subprocess.Popen(argv, env=env or clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_stuck(proc, tmp_path):
    """Rank 2 waits in load_batch, the others have entered step 3's all_reduce."""
    ready = lambda: ((tmp_path / "stuck").exists() and all(   # noqa: E731
        (tmp_path / f"at3_{r}").exists() for r in (0, 1, 3)))
    assert wait_for(ready, 120), proc.stderr.read() if proc.poll() is not None else "not stuck"


def stacks(log_dir, *more, env=None):
    return subprocess.run(mpilaunch_argv("stacks", str(log_dir), *more), env=env or clean_env(),
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def release_and_finish(proc, tmp_path):
    kids = descendants(proc.pid)
    (tmp_path / "release").touch()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert all((tmp_path / f"done_{r}").exists() for r in range(4))
    assert wait_for(lambda: not alive(kids), 10), alive(kids)
    assert not (tmp_path / "logs" / ".mpilaunch-stacks").exists()
    return err


@needs_torch
@pytest.mark.parametrize("mpi", ALL)
def test_the_command_names_the_stuck_rank_and_the_job_goes_on(mpi, tmp_path):
    proc = start(tmp_path, "--mpirun", mpi.mpirun)
    try:
        wait_stuck(proc, tmp_path)
        got = stacks(tmp_path / "logs")
    except BaseException:
        proc.kill()
        raise
    host = os.uname().nodename
    assert got.returncode == 0, got.stdout + got.stderr
    want = f"verdict: rank 2 on host {host}: {LINE}; ranks 0, 1, 3 in all_reduce (torch.distributed)"
    assert want in got.stdout.splitlines(), got.stdout
    out_dir = got.stdout.split(" in ", 1)[1].split(" (")[0]
    assert sorted(os.listdir(out_dir)) == [f"rank_{r}.txt" for r in range(4)] + ["verdict.txt"]
    assert "> time.sleep(0.05)" in open(os.path.join(out_dir, "rank_2.txt")).read()
    assert "all_reduce (" in open(os.path.join(out_dir, "rank_0.txt")).read()
    assert os.path.dirname(out_dir) == str(tmp_path / "logs" / "stacks")
    release_and_finish(proc, tmp_path)


WAITER = r'''
import os, sys, time
open(os.path.join(sys.argv[1], "up_" + os.environ["RANK"]), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "release")):
    time.sleep(0.05)
'''


@pytest.mark.parametrize("mpi", [m for m in ALL if m.id == "mpich"])
def test_without_py_spy_one_line_names_the_extra_and_a_finished_job_is_one_line(mpi, tmp_path):
    """MPICH's venv has no py-spy beside its interpreter, and the ranks' PATH has none."""
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    bare = clean_env(PATH="/usr/bin:/bin")
    proc = subprocess.Popen(mpis.mpilaunch_argv(mpi, "-np", "2", "--no-scheduler", "--master_port", "0",
                                                "--log_dir", str(tmp_path / "logs"), str(script),
                                                str(tmp_path)),
                            env=bare, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((tmp_path / f"up_{r}").exists() for r in range(2)), 60)
        assert wait_for(lambda: (tmp_path / "logs" / ".mpilaunch-stacks").exists(), 10)
        got = stacks(tmp_path / "logs")
    except BaseException:
        proc.kill()
        raise
    kids = descendants(proc.pid)
    (tmp_path / "release").touch()
    assert proc.wait(60) == 0 and wait_for(lambda: not alive(kids), 10)
    assert got.returncode == 1, got.stdout + got.stderr
    assert got.stdout.splitlines()[1] == (
        "verdict: no stacks from ranks 0, 1 (mpilaunch.rank: no stacks: py-spy is not installed "
        "here (pip install 'mpilaunch[stall]', or pip install py-spy))")
    ended = stacks(tmp_path / "logs")
    assert ended.returncode == 2 and ended.stdout == ""
    assert ended.stderr == (f"mpilaunch: error: no running mpilaunch job writes to {tmp_path / 'logs'} "
                            "(no .mpilaunch-stacks there: the job has ended, or it was started "
                            "with another --log_dir)\n")
    missing = stacks(tmp_path / "nowhere")
    assert missing.returncode == 2
    assert missing.stderr == (f"mpilaunch: error: LOG_DIR {str(tmp_path / 'nowhere')!r}: no such "
                              "directory; give the --log_dir of a running job\n")


@needs_torch
@pytest.mark.parametrize("mpi", [m for m in ALL if m.id in ("ompi5", "impi")])
def test_the_stall_summary_names_the_stuck_rank(mpi, tmp_path):
    """--stall-timeout on the same job, never released: every rank is silent (rank 2 in
    load_batch, the others in all_reduce); the summary's verdict names rank 2, the event
    record has it, and mpilaunch report marks rank 2."""
    proc = start(tmp_path, "--mpirun", mpi.mpirun, "--stall-timeout", "4")
    try:
        wait_stuck(proc, tmp_path)
        kids = descendants(proc.pid)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    host = os.uname().nodename
    assert proc.returncode == 124, err
    assert "root cause: stalled: no worker showed progress" in err
    want = f"  verdict: rank 2 on host {host}: {LINE}; ranks 0, 1, 3 in all_reduce (torch.distributed)"
    assert want in err.splitlines(), err
    assert wait_for(lambda: not alive(kids), 10), alive(kids)
    records = [json.loads(line) for line in open(tmp_path / "logs" / "events.jsonl")]
    stacks_rec, = [r for r in records if r["kind"] == "stacks"]
    assert stacks_rec["odd"] == [2] and stacks_rec["reason"] == "stall"
    assert os.path.isfile(os.path.join(stacks_rec["dir"], "rank_2.txt"))
    report = subprocess.run(mpilaunch_argv("report", str(tmp_path / "logs")), env=clean_env(),
                            cwd=REPO, capture_output=True, text=True, timeout=60)
    assert report.returncode == 0, report.stderr
    html = open(tmp_path / "logs" / "report.html").read()
    assert "suspect: rank 2" in html


MS_STUCK = r'''
import os, sys, time

out = sys.argv[1]
role = os.environ.get("MS_ROLE")


def load_data():
    if os.environ["RANK"] == "1":
        open(os.path.join(out, "stuck"), "w").close()
        while not os.path.exists(os.path.join(out, "release")):
            time.sleep(0.05)


if role == "MS_WORKER":
    load_data()
from mindspore.communication import init

init()
if role == "MS_WORKER":
    open(os.path.join(out, "done_" + os.environ["RANK"]), "w").close()
'''


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
def test_a_stuck_mindspore_worker_is_named_the_others_in_inits_rendezvous(tmp_path):
    """2 workers + the scheduler on rank 0 (Open MPI 5): worker 1 waits in load_data before
    init(); worker 0 (and the scheduler, in rank 0's file, not counted) wait in init's
    rendezvous. Named; released, the job completes."""
    script = tmp_path / "ms_stuck.py"
    script.write_text(MS_STUCK)
    argv = [MS_PY, "-m", "mpilaunch", "--mpirun", mpis.OMPI5.mpirun, "--python", MS_PY, "-np", "2",
            "--master_port", free_port(), "--log_dir", str(tmp_path / "logs"), str(script),
            str(tmp_path)]
    proc = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    host = os.uname().nodename
    line = MS_STUCK.splitlines().index("            time.sleep(0.05)") + 1
    want = (f"verdict: rank 1 on host {host}: ms_stuck.py:{line} in load_data; rank 0 in init "
            "(mindspore.communication)")
    try:
        assert wait_for(lambda: (tmp_path / "stuck").exists(), 120)
        # worker 0 imports MindSpore (seconds) before it waits in init: asked until it is there
        got = wait_for(lambda: (lambda r: r if want in r.stdout else None)(stacks(tmp_path / "logs")), 120, 0.5)
    except BaseException:
        proc.kill()
        raise
    assert got, stacks(tmp_path / "logs").stdout
    out_dir = got.stdout.split(" in ", 1)[1].split(" (")[0]
    assert "=== scheduler pid" in open(os.path.join(out_dir, "rank_0.txt")).read()
    kids = descendants(proc.pid)
    (tmp_path / "release").touch()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert all((tmp_path / f"done_{r}").exists() for r in range(2))
    assert wait_for(lambda: not alive(kids), 10), alive(kids)


def test_an_exec_job_is_one_line(tmp_path):
    """--exec: the program replaces the adapter, so no adapter can be asked: said, exit 2."""
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    proc = subprocess.Popen(mpilaunch_argv("-np", "2", "--exec", "--log_dir", str(tmp_path / "logs"),
                                           str(script), str(tmp_path)),
                            env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((tmp_path / f"up_{r}").exists() for r in range(2)), 60)
        got = stacks(tmp_path / "logs")
    finally:
        (tmp_path / "release").touch()
        proc.communicate(timeout=60)
    assert got.returncode == 2 and got.stdout == ""
    assert got.stderr == (f"mpilaunch: error: the job writing to {tmp_path / 'logs'} (mpilaunch pid "
                          f"{proc.pid}) runs its program with --exec: no adapter stays beside it "
                          "to read its stacks; on a rank's host, py-spy dump --native --pid PID "
                          "reads it\n")
    assert proc.returncode == 0 and not (tmp_path / "logs" / ".mpilaunch-stacks").exists()
