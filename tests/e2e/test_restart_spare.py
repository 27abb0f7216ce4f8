"""In-place restarts and the spare worker (rank/inplace/prestart.py, loop.py): a restart that
comes while the next attempt's spare is still importing waits for it, however busy the
machine, and the spare becomes the worker; it is not thrown away for a fresh interpreter
that would import the same modules from the start. Real mpirun, plain Python: the "heavy"
module (``MPILAUNCH_SPARE_PRELOAD``) sleeps in its import, so the spare is still importing
when rank 1 fails; each adapter says what became of its spare (``MPILAUNCH_DEBUG_SPARE``).
Then a worker restarted in its spare splits its streams for torchrun's ``--redirects`` as a
fresh one does."""
import os
import subprocess

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.procs import watch_to_end

SLOW = 6.0   # s the module's import takes: a fresh worker after the failure would pay all of it

# Records when each process began importing it (its pid), then takes SLOW seconds.
SLOWMOD = """\
import os, time
out = os.environ["SPARE_TEST_OUT"]
with open(os.path.join(out, "import_%d" % os.getpid()), "w") as fh:
    fh.write(repr(time.time()))
time.sleep(float(os.environ["SPARE_TEST_SLOW"]))
"""

# Attempt 0: rank 1 fails without the slow import, once rank 0's worker and both ranks' spares
# are in theirs and a second has passed (a fresh worker's import after the failure would end
# SLOW s after it, the spares' one second sooner); attempt 1: each rank records which process
# runs it, and when.
TRAIN = """\
import os, sys, time
out = os.environ["SPARE_TEST_OUT"]
rank, k = int(os.environ["RANK"]), int(os.environ["MPILAUNCH_RESTART_COUNT"])
if k == 0 and rank == 1:
    deadline = time.time() + 60
    while len([n for n in os.listdir(out) if n.startswith("import_")]) < 3 and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(1)
    with open(os.path.join(out, "failed"), "w") as fh:
        fh.write(repr(time.time()))
    sys.exit(1)
import slowmod
with open(os.path.join(out, "run_%d_%d" % (k, rank)), "w") as fh:
    fh.write("%d %r" % (os.getpid(), time.time()))
if k == 0:
    time.sleep(600)
"""


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_a_restart_waits_for_the_spare_still_importing(mpirun, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "slowmod.py").write_text(SLOWMOD)
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    logs = tmp_path / "logs"
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = clean_env(SPARE_TEST_OUT=out, SPARE_TEST_SLOW=SLOW, MPILAUNCH_SPARE_PRELOAD="slowmod",
                    MPILAUNCH_DEBUG_SPARE=1, PYTHONPATH=path)
    argv = mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                          "--log_dir", str(logs), "--max_restarts", "1", str(script))
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, _, err, kids = watch_to_end(proc, 180)
    assert proc.returncode == 0, err
    assert "restarted in place: attempt 1 of at most 2" in err and "attempt 1: succeeded" in err, err
    failed = float((out / "failed").read_text())
    for rank in (0, 1):
        said = [ln.rsplit(": spare ", 1)[1] for ln in err.splitlines()
                if ln.startswith(f"mpilaunch.rank: rank {rank}: spare ")]
        # never "not ready in time": that was the failing rank tearing down its own next
        # attempt on a late word of the restart (rank/inplace/loop.py Restarts._deliver)
        assert said == ["waited for"], (rank, said, err)
        pid, ran = (out / f"run_1_{rank}").read_text().split()
        began = float((out / f"import_{pid}").read_text())
        # the process that ran attempt 1 began its import before the failure: the spare, and it
        # ran the script before a fresh interpreter could have finished the import
        assert began < failed, (rank, began - failed)
        assert float(ran) - failed < SLOW, (rank, float(ran) - failed)
    left = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    left += [p for p in psutil.process_iter(["cmdline"])
             if str(tmp_path) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid()]
    assert left == [], [p.pid for p in left]


# The spare's module: says when its import is over (the spare then sends its ready byte and
# blocks on its socket: sleeping, as /proc shows).
QUICKMOD = """\
import os
with open(os.path.join(os.environ["SPARE_TEST_OUT"], "ready_%d" % os.getpid()), "w") as fh:
    fh.write("ready")
"""

# Each attempt prints one line on stdout and one on stderr; attempt 0's rank 1 fails once both
# ranks' spares are ready and asleep on their sockets, so both restart onto their spare.
SHOW = """\
import os, sys, time
out = os.environ["SPARE_TEST_OUT"]
rank, k = int(os.environ["RANK"]), int(os.environ["MPILAUNCH_RESTART_COUNT"])
print(f"LINE rank={rank} k={k} out", flush=True)
print(f"LINE rank={rank} k={k} err", file=sys.stderr, flush=True)
def asleep(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "S"
    except OSError:
        return False
if k == 0 and rank == 1:
    while True:
        pids = [int(n[6:]) for n in os.listdir(out) if n.startswith("ready_")]
        if len(pids) == 2 and all(asleep(p) for p in pids):
            sys.exit(3)
        time.sleep(0.05)
if k == 0:
    time.sleep(600)
"""


@pytest.mark.parametrize("mpirun", MPIRUNS[:1])
def test_a_worker_restarted_onto_its_spare_keeps_torchruns_redirects(mpirun, tmp_path):
    """``--redirects 1``: stdout kept off the console, in the log: the restarted worker (the
    spare adopted) splits its streams as attempt 0's freshly started one does."""
    out = tmp_path / "out"
    out.mkdir()
    (tmp_path / "quickmod.py").write_text(QUICKMOD)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    logs = tmp_path / "logs"
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = clean_env(SPARE_TEST_OUT=out, MPILAUNCH_SPARE_PRELOAD="quickmod",
                    MPILAUNCH_DEBUG_SPARE=1, PYTHONPATH=path)
    argv = mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                          "--log_dir", str(logs), "--max_restarts", "1", "--redirects", "1",
                          str(script))
    proc = subprocess.run(argv, env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):   # attempt 1 ran on the spare
        assert f"mpilaunch.rank: rank {rank}: spare ready" in proc.stderr, proc.stderr
    shown = sorted(ln.split("LINE ", 1)[1] for ln in (proc.stdout + proc.stderr).splitlines()
                   if "LINE rank=" in ln)
    assert shown == [f"rank={r} k={k} err" for r in (0, 1) for k in (0, 1)], proc.stdout + proc.stderr
    for k in (0, 1):
        for rank in (0, 1):
            log = (logs / f"attempt{k}" / f"worker_{rank}.log").read_text().splitlines()
            assert sorted(log) == [f"LINE rank={rank} k={k} err",
                                   f"LINE rank={rank} k={k} out"], (k, rank, log)
