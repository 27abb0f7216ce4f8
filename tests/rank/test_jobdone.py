"""MindSpore jobs end when their workers end (mpilaunch/rank/jobdone.py): rank
0's adapter stops the scheduler once every rank's worker exited 0, told by a UDP datagram at the
scheduler's port; with no word (no job id, a lost datagram) the old path (the scheduler leaves
by itself, or --scheduler-grace) is unchanged. The time bounds are generous: they tell "stopped
at once" from "waited for the 60 s scheduler / the grace", nothing finer."""
import os
import re
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest

from helpers import REPO
from helpers.adapter import adapter_cmd, fake_rank_env, infos, status_lines, write_worker
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS
from helpers.ports import free_port
from helpers.procs import pid_alive as alive, wait_for

from mpilaunch.rank import jobdone


# ------------------------------------------------------------------ pure parts

def test_job_id_and_messages():
    assert jobdone.job_id({"PMIX_NAMESPACE": "prterun-vm-1@1"}) == "prterun-vm-1@1|||"
    assert jobdone.job_id({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0"}) == "|||7|0"
    assert jobdone.job_id({"PMI_RANK": "0", "PMI_SIZE": "2"}) is None      # Hydra: none
    msg = jobdone.message("job a", 3)
    assert jobdone.parse(msg, "job a", 4) == 3
    assert jobdone.parse(msg, "job b", 4) is None          # another job
    assert jobdone.parse(msg, "job a", 3) is None          # beyond the job's size
    assert jobdone.parse(jobdone.message("job a", 0), "job a", 4) is None   # rank 0 is us
    for junk in (b"", b"hello", jobdone.PREFIX + b"job a x", jobdone.PREFIX + b"\xff 1"):
        assert jobdone.parse(junk, "job a", 4) is None


def test_listener_counts_each_rank_once():
    port = free_port()
    env = {"MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(port), "MS_WORKER_NUM": "3",
           "PMIX_NAMESPACE": "ns"}
    got = []
    lst = jobdone.Listener(env, got.append)
    assert lst.sock is not None and not lst.complete()
    jobdone.send_done({**env, "PMIX_NAMESPACE": "other"}, 1)   # not ours
    jobdone.send_done(env, 1)
    jobdone.send_done(env, 1)
    jobdone.send_done(env, 2)
    end = time.monotonic() + 5
    while not lst.complete() and time.monotonic() < end:
        time.sleep(0.01)
    assert lst.complete() and got == [("peer-done", 1), ("peer-done", 2)]
    lst.sock.close()


def test_listener_without_job_id_or_with_the_port_taken_stays_off():
    port = free_port()
    env = {"MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(port), "MS_WORKER_NUM": "2"}
    assert jobdone.Listener(env, print).sock is None                       # no job id
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("0.0.0.0", int(port)))
        lst = jobdone.Listener({**env, "PMIX_NAMESPACE": "ns"}, print)
        assert lst.sock is None and not lst.complete()


# ------------------------------------------------------------------ the adapter

def _adapter(tmp_path, port, env, *opts, timeout=60):
    script, out = write_worker(tmp_path)
    env.setdefault("T_DIR", out)
    cmd = adapter_cmd("--log-dir", str(tmp_path / "logs"), "--master-port", str(port), *opts,
                      script=script)
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return p, time.monotonic() - t0, out


def test_rank0_stops_a_lingering_scheduler_once_every_worker_finished(tmp_path):
    port = free_port()
    # rank 0 of 2 (the other rank is this test): worker exits 0, scheduler would sleep 60 s
    env = fake_rank_env(rank=0, size=2, local_rank=0, local_size=2, PMIX_NAMESPACE="t-ns",
                        T_WORKER="await:sched_0;exit:0", T_SCHED="sleep:60")
    peer = {"MS_SCHED_HOST": "127.0.0.1", "MS_SCHED_PORT": str(port), "MS_WORKER_NUM": "2",
            "PMIX_NAMESPACE": "t-ns"}
    script, out = write_worker(tmp_path)

    def rank1_done():
        # as a real rank 1 would: its worker finishes only after the scheduler is up (MindSpore's
        # workers register with it first), and rank 0 listens before starting any child. A fixed
        # 2 s timer lost the datagram when a loaded machine started the adapter later than that.
        if wait_for(lambda: os.path.exists(os.path.join(out, "info_sched_0.json")), 30):
            jobdone.send_done(peer, 1)

    sender = threading.Thread(target=rank1_done, daemon=True)
    sender.start()
    p, elapsed, out = _adapter(tmp_path, port, env, "--scheduler-grace", "50")
    sender.join(35)
    assert p.returncode == 0, p.stderr
    assert elapsed < 30                     # not the scheduler's 60 s, not the 50 s grace
    assert status_lines(p.stderr) == []     # a normal end: nothing to report
    assert not alive(infos(out)["sched_0"]["pid"])


def test_without_the_others_word_the_grace_still_applies(tmp_path):
    port = free_port()
    env = fake_rank_env(rank=0, size=2, local_rank=0, local_size=2, PMIX_NAMESPACE="t-ns",
                        T_WORKER="exit:0", T_SCHED="sleep:60")
    p, elapsed, out = _adapter(tmp_path, port, env, "--scheduler-grace", "2")
    assert p.returncode == 0, p.stderr
    assert 2.0 <= elapsed < 30
    [line] = status_lines(p.stderr)
    assert (line["role"], line["event"]) == ("scheduler", "grace-expired")


# ------------------------------------------------------------------ through mpirun

SCRIPT = """\
import os, sys, time
if os.environ.get("MS_ROLE") == "MS_SCHED":
    time.sleep(float(sys.argv[1]))      # a scheduler that would linger (MindSpore: up to 5 s)
    sys.exit(0)
# a worker ends only once rank 0's worker runs (MindSpore's register with the scheduler first):
# rank 0's adapter listens for 'worker done' before starting any child. Without this, on a
# loaded machine ranks 1 and 2 could be done before rank 0's adapter was even listening.
up0 = os.path.join(sys.argv[2], "worker0_up")
if os.environ["RANK"] == "0":
    open(up0, "w").close()
end = time.time() + 30
while not os.path.exists(up0) and time.time() < end:
    time.sleep(0.02)
time.sleep(0.2 * int(os.environ["RANK"]))
print("worker", os.environ["RANK"], "done", flush=True)
"""


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_job_ends_when_its_workers_end(tmp_path, mpirun):
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    args = [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "3", "--oversubscribe",
            "--scheduler", "--master_port", "0", "--log_dir", str(tmp_path / "logs"),
            str(script), "60", str(tmp_path)]
    t0 = time.monotonic()
    p = subprocess.run(args, env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    assert sorted(re.findall(r"worker (\d) done", p.stdout)) == ["0", "1", "2"]
    assert elapsed < 30, p.stderr            # the 60 s scheduler was stopped
    left = [q for q in psutil.process_iter(["cmdline"])
            if str(script) in " ".join(q.info["cmdline"] or [])]
    assert not psutil.wait_procs(left, timeout=3)[1]
