"""A big job's output with real processes: `mpilaunch logs` on a restarted job (with its own
--worker_log_name) and on a running one (--follow) (docs/LOGS.md)."""
import os
import subprocess
import sys
import threading
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
    # the job's own log names (the record keeps the template, `logs` reads it)
    p = subprocess.run(mpilaunch_argv(OMPI5, "-np", "3", "--max_restarts", "1", "--master_port", free_port(),
                                      "--log_dir", str(logs), "--worker_log_name", "train-{hostname}-{rank}.txt",
                                      str(script)),
                       capture_output=True, text=True, env=clean_env(MARKS=str(tmp_path)), cwd=tmp_path,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    assert sorted(n for n in os.listdir(logs / "attempt1") if not n.startswith(".")) == \
        [f"train-{os.uname().nodename}-{r}.txt" for r in range(3)]
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


DUMP = """\
import os, sys, time
rank = int(os.environ["RANK"])
for i in range(150):
    print(f"config.key_{i:03d} = {'v' * 40}{i}")
print(f"rank {rank} own line", flush=True)
marks = os.environ["MARKS"]
open(os.path.join(marks, f"dump.{rank}"), "w").close()
if rank == int(os.environ.get("FLOOD_RANK", "-1")):
    for i in range(int(os.environ["FLOOD"])):
        print(f"rank {rank} flood {i:06d} {'x' * 60}")
    sys.stdout.flush()
    open(os.path.join(marks, "flooded"), "w").close()
if rank == int(os.environ.get("FAIL_RANK", "-1")):   # once every rank has printed its lines
    want = int(os.environ["WORLD_SIZE"]) + ("FLOOD_RANK" in os.environ)
    while len([n for n in os.listdir(marks) if n.startswith(("dump.", "flooded"))]) < want:
        time.sleep(0.02)
    # and, with GO, once the test saw them on the console: printed is not yet relayed, and the
    # teardown of a failure cuts what is still in transit, as under a bare mpirun
    while "GO" in os.environ and not os.path.exists(os.environ["GO"]):
        time.sleep(0.02)
    # the flood rank has ended (its adapter relays all of it before its exit's record): the
    # teardown cuts nothing of it, and its lines are not in transit beside the traceback
    done = '"kind":"process_exit"'
    while "FLOOD_RANK" in os.environ and not any(done in ln and f'"rank":{os.environ["FLOOD_RANK"]},' in ln
                                                 for ln in open(os.path.join(marks, "logs", "events.jsonl"))):
        time.sleep(0.02)
    raise RuntimeError(f"rank {rank} gives up")
"""


def _launch(tmp_path, np, *flags, **env):
    script = tmp_path / "dump.py"
    script.write_text(DUMP)
    logs = tmp_path / "logs"
    p = subprocess.run(mpilaunch_argv(OMPI5, "-np", str(np), "--master_port", free_port(), "--log_dir", str(logs),
                                      *flags, str(script)),
                       capture_output=True, text=True, env=clean_env(MARKS=str(tmp_path), **env), cwd=tmp_path,
                       timeout=300)
    return p, logs


def test_48_ranks_dump_shows_once_with_its_ranks_and_every_own_line(tmp_path):
    p, logs = _launch(tmp_path, 48, "--console_collapse", "600")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    dump = [f"config.key_{i:03d} = {'v' * 40}{i}" for i in range(150)]
    assert [ln for ln in lines if "config.key_" in ln] == [f"[rank0-47] {d}" for d in dump]
    assert sorted(ln for ln in lines if "config.key_" not in ln) == sorted(
        f"[rank{r}] rank {r} own line" for r in range(48))
    for r in range(48):   # the logs are whole
        assert (logs / f"worker_{r}.log").read_text().splitlines() == dump + [f"rank {r} own line"]
    got = _logs(str(logs), "--rank", "7", "--tail", "2").stdout
    assert got == f"[rank7] {dump[-1]}\n[rank7] rank 7 own line\n"


def test_collapsing_off_and_with_a_tail_spec_and_a_failing_ranks_traceback_whole(tmp_path):
    p, _ = _launch(tmp_path, 4, "--console_collapse", "0")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 4 * 151 and p.stdout.count("[rank3] config.key_149") == 1
    # rank 2 fails once the console has shown the dump's last line collapsed over the three
    # ranks tailed (a timer lets it fail anyway, for the assertions to say what was missing)
    logs, go = tmp_path / "logs", tmp_path / "go"
    job = subprocess.Popen(mpilaunch_argv(OMPI5, "-np", "4", "--master_port", free_port(), "--log_dir", str(logs),
                                          "--tail_worker_log", "0,2,3", "--console_collapse", "600",
                                          str(tmp_path / "dump.py")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                           env=clean_env(MARKS=str(tmp_path), FAIL_RANK="2", GO=str(go)))
    timer = threading.Timer(120, go.touch)
    timer.start()
    try:
        lines = []
        for line in job.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("[rank0,2,3] config.key_149 "):
                break
        go.touch()
        out, err = job.communicate(timeout=300)
    finally:
        timer.cancel()
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 1, err
    lines += out.splitlines()
    assert lines[0] == f"[rank0,2,3] config.key_000 = {'v' * 40}0"
    assert not any(ln.startswith("[rank1]") for ln in lines)
    trace = [ln for ln in lines if ln.startswith("[rank2] ") and "own line" not in ln]
    assert trace[0] == "[rank2] Traceback (most recent call last):"
    assert trace[-1] == "[rank2] RuntimeError: rank 2 gives up"
    log_trace = (logs / "worker_2.log").read_text().splitlines()[151:]
    assert trace == [f"[rank2] {ln}" for ln in log_trace]
    assert "RuntimeError: rank 2 gives up" in err, err    # the summary


def test_over_the_budget_the_console_keeps_rank_0_lines_alike_and_the_failing_ranks_traceback(tmp_path):
    p, logs = _launch(tmp_path, 4, "--console_budget", "20000", "--console_collapse", "600", FAIL_RANK="1",
                      FLOOD_RANK="3", FLOOD="20000")
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    notice = [ln for ln in lines if ln.startswith("mpilaunch: console: the ranks' lines are over 20000 bytes/s")]
    assert len(notice) == 1 and f"{logs}/worker_<rank>.log" in notice[0]
    assert [ln for ln in lines if "config.key_" in ln] == [f"[rank0-3] config.key_{i:03d} = {'v' * 40}{i}"
                                                            for i in range(150)]
    assert "[rank0] rank 0 own line" in lines    # rank 0's lines pass whatever the rate
    floods = [ln for ln in lines if " flood " in ln]
    assert 0 < len(floods) < 20000                      # the budget held most of it back
    trace = (logs / "worker_1.log").read_text().splitlines()[151:]   # rank 1's traceback, whole
    assert trace[0] == "Traceback (most recent call last):"
    # in the summary always (the log's tail); on the console whole and in its place when mpirun
    # forwarded it before the teardown ended it (a flood in its pipes delays that: not the budget's)
    assert "".join(f"    | {ln}\n" for ln in trace) in p.stderr, p.stderr
    shown = [ln for ln in lines if ln.startswith("[rank1] ") and "own line" not in ln]
    assert shown in ([], [f"[rank1] {ln}" for ln in trace]), shown
    assert len((logs / "worker_3.log").read_text().splitlines()) == 151 + 20000   # nothing lost
