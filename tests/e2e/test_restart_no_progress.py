"""--max_no_progress_restarts: a job whose script fails before any worker made progress is not
restarted again and again (mpilaunch/attempts/progress.py); a job that made progress and then
failed is. Real mpirun, plain Python scripts."""
import os
import subprocess
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.procs import watch_to_end
from mpilaunch.attempts import progress

# Rank 1 fails once the launcher has recorded rank 0's first output (its event record) and
# progress.LEAD seconds have passed since, by the launcher's clock (this machine's): the state
# the rule asks of "went on after writing", whatever the load.
PROGRESS_THEN_FAIL = """\
import json, os, sys, time
rank = int(os.environ["RANK"])
attempt = int(os.environ["MPILAUNCH_RESTART_COUNT"])
if rank == 0:
    print("step 1", flush=True)
    time.sleep(600)
record = os.path.join(sys.argv[1], "events.jsonl")
def since():
    try:
        lines = open(record).read().splitlines()
    except OSError:
        return None
    return next((r["t"] for r in map(json.loads, lines) if r.get("kind") == "first_output"
                 and r.get("rank") == 0 and r.get("attempt") == attempt), None)
while since() is None or time.time() < since() + %s:
    time.sleep(0.05)
sys.exit(3)
""" % (progress.LEAD + 0.5)


def _run(mpirun, tmp_path, script_text, *args):
    script = tmp_path / "train.py"
    script.write_text(script_text)
    logs = tmp_path / "logs"
    argv = mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                          "--log_dir", str(logs), *args, str(script), str(logs))
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, err, kids = watch_to_end(proc, 180)
    took = time.monotonic() - t0
    left = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    left += [p for p in psutil.process_iter(["cmdline"])
             if str(tmp_path) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()]
    return proc.returncode, err, logs, took, left


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_a_script_failing_at_import_ends_after_the_limit_with_the_budget_unused(mpirun, tmp_path):
    rc, err, logs, took, left = _run(mpirun, tmp_path, "import no_such_module_here\n",
                                     "--max_restarts", "7")   # the default limit: 3
    assert rc == 1, err      # the worker's status
    lines = err.splitlines()
    stop = [ln for ln in lines if "in a row failed before any worker made progress (last:" in ln]
    assert len(stop) == 1, err
    assert stop[0].startswith("mpilaunch: 3 attempts in a row failed before any worker made "
                              "progress (last: rank ")
    assert stop[0].endswith("exit code 1: ModuleNotFoundError: No module named "
                            "'no_such_module_here' (train.py:1 in <module>)): not restarting; "
                            "restart budget 5 left unused"), err   # the log's traceback named
    assert "mpilaunch: 3 attempt(s), restart budget 7; exit status 1 (the last attempt's)" in lines
    assert ("  3 attempts in a row failed before any worker made progress "
            "(--max_no_progress_restarts 3): not restarted; restart budget 5 left unused") in lines
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("attempt")) == [
        "attempt0", "attempt1", "attempt2"]
    assert "ModuleNotFoundError" in (logs / "attempt2" / "worker_0.log").read_text()
    assert took < 90, took
    assert left == []
    print(f"no-progress job ended after {took:.1f} s")


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_a_job_that_made_progress_then_failed_is_not_counted(mpirun, tmp_path):
    rc, err, logs, _, left = _run(mpirun, tmp_path, PROGRESS_THEN_FAIL, "--max_restarts", "1",
                                  "--max_no_progress_restarts", "1")
    assert rc == 3, err
    assert "made progress" not in err
    assert "mpilaunch: 2 attempt(s), restart budget 1; exit status 3 (the last attempt's)" in err
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("attempt")) == [
        "attempt0", "attempt1"]
    assert left == []


@pytest.mark.parametrize("mpirun", MPIRUNS[:1])
def test_no_limit_spends_the_whole_budget(mpirun, tmp_path):
    rc, err, _, _, left = _run(mpirun, tmp_path, "import no_such_module_here\n",
                               "--max_restarts", "3", "--max_no_progress_restarts", "0")
    assert rc == 1, err
    assert "mpilaunch: 4 attempt(s), restart budget 3; exit status 1 (the last attempt's)" in err
    assert "in a row failed before any worker made progress" not in err
    assert left == []
