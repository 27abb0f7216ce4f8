"""Stall watchdog (docs/LONG_JOBS.md): a job whose workers all stop showing progress is ended
(or restarted) after --stall-timeout, with every worker's stacks in the log dir."""
import os
import shutil
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.procs import wait_for

# Rank 1 blocks forever (never reaches the barrier); rank 0 waits in gloo's barrier for it.
# Each rank beats its heartbeat while it imports torch and meets the others: under load the
# import alone can outlast the 4 s stall timeout, and the stall to see is the barrier's.
BARRIER = r'''
import datetime, os, pathlib, sys, threading, time
rank = int(os.environ["RANK"])
hb, started = pathlib.Path(os.environ["MPILAUNCH_HEARTBEAT_FILE"]), threading.Event()


def beat():
    while not started.wait(0.5):
        hb.touch()


threading.Thread(target=beat, daemon=True).start()
import torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(hours=1))
started.set()
print(f"READY {rank}", flush=True)
open(os.path.join(sys.argv[1], f"ready_{rank}"), "w").close()
if rank == 1:
    while True:
        time.sleep(3600)
dist.barrier()
'''

# Quiet but alive: rank 0 touches the heartbeat file; rank 1 prints now and then.
HEARTBEAT = r'''
import os, pathlib, sys, time
rank = int(os.environ["RANK"])
hb = pathlib.Path(os.environ["MPILAUNCH_HEARTBEAT_FILE"])
for i in range(int(sys.argv[1])):
    time.sleep(0.5)
    if rank == 0:
        hb.touch()
    elif i % 2 == 0:
        print("tick", i, flush=True)
'''

needs_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def _py_spy():
    return shutil.which("py-spy") or os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy"))


@needs_torch
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_a_deadlocked_barrier_ends_the_job_with_stacks(mpirun, tmp_path):
    script = tmp_path / "barrier.py"
    script.write_text(BARRIER)
    logs = tmp_path / "logs"
    proc = subprocess.Popen(
        mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                       "--stall-timeout", "4", "--log_dir", str(logs), str(script), str(tmp_path)),
        env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(lambda: all((tmp_path / f"ready_{r}").exists() for r in (0, 1)), 90)
        t_ready = time.monotonic()
        kids = psutil.Process(proc.pid).children(recursive=True)
        _, err = proc.communicate(timeout=60)
        took = time.monotonic() - t_ready
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 124, err
    assert took < 4 + 10, took           # timeout + dump + teardown
    assert "root cause: stalled: no worker showed progress" in err
    assert "stalled: rank 0 on host" in err and "stalled: rank 1 on host" in err
    stacks = (logs / "stacks_0.txt").read_text()
    if _py_spy():
        assert "barrier" in stacks, stacks
        sleep_line = BARRIER.splitlines().index("        time.sleep(3600)") + 1
        assert f"barrier.py:{sleep_line}" in (logs / "stacks_1.txt").read_text()   # its endless sleep
    else:
        assert "py-spy is not installed" in stacks and "py-spy is not installed" in err
    assert [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE] == []


def test_heartbeat_and_output_are_progress(tmp_path):
    script = tmp_path / "hb.py"
    script.write_text(HEARTBEAT)
    # 3 s: the watchdog starts before the worker, whose first sign comes after its start-up
    # plus 0.5 s; a loaded machine can make that more than 1.5 s (the old value) on both ranks
    r = subprocess.run(mpilaunch_argv("-np", "2", "--no-scheduler", "--master_port", "0",
                                      "--stall-timeout", "3", "--log_dir", str(tmp_path / "logs"),
                                      str(script), "12"),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "stalled" not in r.stderr


def test_stall_with_budget_left_restarts(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text("import os, time\n"
                      "if os.environ['MPILAUNCH_RESTART_COUNT'] == '0':\n"
                      "    time.sleep(3600)\n"
                      "print('fine', flush=True)\n")
    r = subprocess.run(mpilaunch_argv("-np", "2", "--no-scheduler", "--master_port", "0",
                                      "--stall-timeout", "2", "--max_restarts", "1", "--log_dir",
                                      str(tmp_path / "logs"), str(script)),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    assert "attempt 0: exit status 124: stalled: no progress from ranks 0, 1" in r.stderr
    assert "attempt 1: succeeded" in r.stderr
