"""The Python API (mpilaunch/api.py) with real jobs under mpirun: a 2-rank job that succeeds,
one that fails (its root cause, per-rank records with the workers' real pids), one whose rank
raises (its typed failure: the exception at its file:line), a bad option raising the CLI's own
one-line message with nothing started, and stop() on a running job. The result comes from the
launcher itself: the event record is deleted as soon as the job starts."""
import os
import subprocess
import sys
import time

import pytest

import mpilaunch
from helpers.launch import clean_env

WORKER = r'''
import os, sys, time
rank = int(os.environ["RANK"])
open(os.path.join(sys.argv[1], f"pid{rank}"), "w").write(str(os.getpid()))
print(f"rank {rank} of {os.environ['WORLD_SIZE']}", flush=True)
mode = sys.argv[2]
if mode == "fail" and rank == 1:
    while not os.path.exists(os.path.join(sys.argv[1], "pid0")):   # rank 0 runs: its pid is known
        time.sleep(0.01)
    sys.exit(7)
if mode == "raise" and rank == 1:
    raise ValueError(f"bad batch size {rank - 1}")   # RAISE_LINE
if mode in ("fail", "hang", "raise"):
    time.sleep(60)
'''


@pytest.fixture
def job(tmp_path):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    out = open(tmp_path / "launcher.out", "w")

    def go(mode, **opts):
        opts.setdefault("log_dir", str(tmp_path / "logs"))
        opts.setdefault("master_port", 0)
        return mpilaunch.start(str(script), [str(tmp_path), mode], np=2, env=clean_env(),
                               stdout=out, stderr=subprocess.STDOUT, **opts)
    go.tmp = tmp_path
    return go


def _pids(tmp_path):
    return {r: int(open(tmp_path / f"pid{r}").read()) for r in range(2)}


def test_a_two_rank_job_returns_its_result(job):
    res = job("ok").wait(timeout=120)
    assert res.ok and res.status == 0 and res.root_cause is None and res.summary is None
    assert res.events_path == os.path.join(str(job.tmp / "logs"), "events.jsonl")
    pids = _pids(job.tmp)
    assert [(r.rank, r.role, r.status, r.pid, r.by) for r in res.ranks] == [
        (0, "worker", 0, pids[0], "itself"), (1, "worker", 0, pids[1], "itself")]
    assert all(r.host == os.uname().nodename and r.started <= r.exited for r in res.ranks)
    assert res.attempts == 1
    assert (job.tmp / "logs" / "worker_1.log").read_text() == "rank 1 of 2\n"


def started_unrecorded(handle):
    """The handle, its event record deleted: the result cannot be read back from it."""
    os.unlink(handle.events_path)
    return handle


def test_a_failing_job_names_its_root_cause(job):
    res = started_unrecorded(job("fail")).wait(timeout=120)
    assert res.status == 7 and not res.ok
    rc = res.root_cause
    assert res.failures == [rc] and (rc.kind, rc.exception) == ("process", None)
    assert (rc.rank, rc.role, rc.code, rc.signal, rc.host) == (1, "worker", 7, None, os.uname().nodename)
    assert rc.log == str(job.tmp / "logs" / "worker_1.log")
    assert "rank 1 (worker)" in rc.text and "exit code 7" in rc.text
    by_rank = {r.rank: r for r in res.ranks}
    assert (by_rank[1].status, by_rank[1].by) == (7, "itself")
    # rank 0 was ended by the teardown: reported so, or killed by mpirun before its adapter
    # could say it (by None: no exit reported)
    assert by_rank[0].by in ("teardown", None) and by_rank[0].pid == _pids(job.tmp)[0]
    assert res.summary.startswith("mpilaunch: job failed (exit status 7)")


def test_a_raised_exception_comes_back_typed(job):
    res = started_unrecorded(job("raise")).wait(timeout=120)
    line = WORKER.splitlines().index(next(x for x in WORKER.splitlines() if "RAISE_LINE" in x)) + 1
    script = str(job.tmp / "w.py")
    [f] = res.failures
    assert (res.status, f.kind, f.rank, f.role, f.code, f.signal) == (1, "process", 1, "worker", 1, None)
    exc = f.exception
    assert (exc.type, exc.message, exc.where, exc.function) == (
        "ValueError", "bad batch size 0", f"{script}:{line}", "<module>")
    assert f.cause == (f"rank 1 (worker) on host {os.uname().nodename}: exit code 1: "
                       f"ValueError: bad batch size 0 (w.py:{line} in <module>)")
    assert res.root_cause is f and f.text == f.cause and f.log == str(job.tmp / "logs" / "worker_1.log")


def test_a_bad_option_raises_the_cli_message_before_anything_starts(job, tmp_path):
    cli = subprocess.run([sys.executable, "-m", "mpilaunch", "-np", "zero", "x.py"],
                         capture_output=True, text=True, env=clean_env(), cwd=tmp_path, timeout=60)
    with pytest.raises(mpilaunch.UsageError) as err:
        mpilaunch.launch("x.py", np="zero", env=clean_env(), cwd=str(tmp_path))
    assert cli.stderr == f"mpilaunch: error: {err.value}\n" and cli.returncode == 2
    logs = tmp_path / "bad-logs"
    with pytest.raises(mpilaunch.UsageError, match="master_port"):
        job("ok", master_port=99999999, log_dir=str(logs))
    assert not logs.exists() and not list(tmp_path.glob("pid*"))
    with pytest.raises(mpilaunch.UsageError, match="no such option; did you mean log_dir"):
        mpilaunch.start("x.py", log_dri="x")
    with pytest.raises(mpilaunch.UsageError, match="a switch; give True or False"):
        mpilaunch.start("x.py", oversubscribe="yes")


def test_stop_ends_every_rank(job):
    handle = job("hang")
    end = time.time() + 60
    while time.time() < end and len(list(job.tmp.glob("pid*"))) < 2:
        time.sleep(0.05)
    pids = _pids(job.tmp)
    handle.stop()
    res = handle.wait(timeout=60)
    assert res.status == 143
    assert res.failures == [mpilaunch.api.Failure("stopped", "stopped by SIGTERM", signal=15)]
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert {r.by for r in res.ranks} <= {"teardown", None}
    assert [r.pid for r in res.ranks] == [pids[0], pids[1]]


def test_the_options_are_the_option_tables():
    from mpilaunch import api
    from mpilaunch.config import options

    names = api._names()
    for o in options.OPTIONS:
        if "run" in o.commands and o.kind not in ("hidden", "version"):
            assert names[o.dest] is o
    assert api.argv_for("t.py", ["--lr", "1"], np=4, exec=True, log_dir="l", oversubscribe=False) == [
        "--np=4", "--exec", "--log_dir=l", "t.py", "--lr", "1"]
    assert api.argv_for("pkg.mod", ["a"], module=True, worker_num=2) == ["--np=2", "-m", "pkg.mod", "a"]
