"""A big job's output with real processes: `mpilaunch logs` on a restarted job and on a
running one (--follow) (docs/LOGS.md)."""
import os
import subprocess
import sys
import time

from helpers import REPO
from helpers.launch import clean_env
from helpers.mpis import OMPI5, mpilaunch_argv
from helpers.ports import free_port

import pytest

pytestmark = pytest.mark.skipif(OMPI5.missing() is not None, reason=str(OMPI5.missing()))

# rank 1 fails the first attempt once every rank has printed its line (marked in MARKS)
RESTARTED = """\
import os, sys, time
rank, count = int(os.environ["RANK"]), int(os.environ.get("MPILAUNCH_RESTART_COUNT", "0"))
print(f"attempt {count} rank {rank} hello", flush=True)
marks = os.environ["MARKS"]
open(os.path.join(marks, f"{count}.{rank}"), "w").close()
if count == 0 and rank == 1:
    while len([n for n in os.listdir(marks) if n.startswith("0.")]) < 3:
        time.sleep(0.02)
    sys.exit(3)
"""


def _logs(*args):
    return subprocess.run([sys.executable, "-m", "mpilaunch", "logs", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def test_logs_of_a_restarted_job_by_rank_host_attempt_and_pattern(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(RESTARTED)
    logs = tmp_path / "logs"
    p = subprocess.run(mpilaunch_argv(OMPI5, "-np", "3", "--max_restarts", "1", "--master_port", free_port(),
                                      "--log_dir", str(logs), str(script)),
                       capture_output=True, text=True, env=clean_env(MARKS=str(tmp_path)), cwd=tmp_path,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    got = _logs(str(logs), "--rank", "1")
    assert (got.returncode, got.stderr) == (0, "")
    assert got.stdout == ("==> attempt 0 <==\n[rank1] attempt 0 rank 1 hello\n"
                          "==> attempt 1 <==\n[rank1] attempt 1 rank 1 hello\n")
    assert sorted(_logs(str(logs), "--attempt", "1", "--grep", "rank [02] ").stdout.splitlines()) == \
        sorted(f"[rank{r}] attempt 1 rank {r} hello" for r in (0, 2))
    here = os.uname().nodename
    by_host = _logs(str(logs), "--host", here, "--attempt", "0").stdout.splitlines()
    assert sorted(by_host) == [f"[rank{r}] attempt 0 rank {r} hello" for r in range(3)]
    assert _logs(str(logs), "--tail", "1", "--attempt", "0", "--rank", "2").stdout == "[rank2] attempt 0 rank 2 hello\n"


FOLLOWED = """\
import os, time
rank, go = int(os.environ["RANK"]), os.environ["GO_FILE"]
print(f"rank {rank} before", flush=True)
while not os.path.exists(go):
    time.sleep(0.05)
print(f"rank {rank} after", flush=True)
"""


def _wait_for(pred, what, timeout=120):
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, what
        time.sleep(0.05)


def test_follow_prints_a_running_jobs_new_lines_and_ends_with_the_job(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(FOLLOWED)
    logs, go = tmp_path / "logs", tmp_path / "go"
    job = subprocess.Popen(mpilaunch_argv(OMPI5, "-np", "2", "--master_port", free_port(), "--log_dir", str(logs),
                                          str(script)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=clean_env(GO_FILE=str(go)), cwd=tmp_path)
    follower = None
    try:
        _wait_for(lambda: all((logs / f"worker_{r}.log").exists() and
                              (logs / f"worker_{r}.log").read_text().endswith("before\n") for r in range(2)),
                  "the ranks' first lines")
        out = tmp_path / "followed.txt"
        with open(out, "wb") as sink:
            follower = subprocess.Popen([sys.executable, "-m", "mpilaunch", "logs", str(logs), "--follow"],
                                        stdout=sink, stderr=subprocess.PIPE, cwd=REPO)
        _wait_for(lambda: out.read_text().count("before") == 2, "the lines before, printed by the follower")
        assert "after" not in out.read_text()
        go.write_text("")
        assert job.wait(timeout=120) == 0, job.stderr.read() if job.stderr else ""
        assert follower.wait(timeout=60) == 0     # it ends on its own once the job has ended
        assert sorted(out.read_text().splitlines()) == sorted(
            f"[rank{r}] rank {r} {w}" for r in range(2) for w in ("before", "after"))
    finally:
        for proc in (job, follower):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
