"""Real MindSpore (CPU) and PyTorch (gloo, DDP) data-parallel training launched by mpilaunch,
and the faults that must end such a job within seconds with nothing left behind."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from helpers.frameworks import MS_PY, MS_TRAIN, TORCH_TRAIN, compare_params, needs_ms, needs_torch, reference
from helpers.launch import clean_env
from helpers.mpis import MPIRUNS, OMPI5_MPIRUN as OMPI5
from helpers.procs import alive, descendants, kill_all, wait_for, wait_gone

_port = [29100]


def next_port():
    _port[0] += 1
    return str(_port[0])


def ms_launch(mpirun, tmp_path, *script_args, extra=()):
    return [MS_PY, "-m", "mpilaunch", "--mpirun", mpirun, "--python", MS_PY, "-np", "2",
            "--master_port", next_port(), "--log_dir", str(tmp_path / "logs"), *extra,
            MS_TRAIN, "--out", str(tmp_path / "out"), *script_args]


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_mindspore_data_parallel_training(mpirun, tmp_path):
    proc = subprocess.run(ms_launch(mpirun, tmp_path, "--steps", "4"), env=clean_env(), cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[rank0] MS_TRAIN_OK rank=0 size=2" in proc.stdout
    assert "[rank1] MS_TRAIN_OK rank=1 size=2" in proc.stdout
    logs = sorted(n for n in os.listdir(tmp_path / "logs") if not n.startswith("."))  # not the times indexes
    assert logs == ["events.jsonl", "scheduler.log", "worker_0.log", "worker_1.log"]
    reference(MS_PY, MS_TRAIN, tmp_path, 4)
    compare_params.check(str(tmp_path / "out"), 2, reference=True, steps=4)


@pytest.mark.slow
@pytest.mark.torch
@needs_torch
@pytest.mark.parametrize("mpirun", MPIRUNS)
def test_pytorch_ddp_training(mpirun, tmp_path):
    cmd = [sys.executable, "-m", "mpilaunch", "--mpirun", mpirun, "-np", "2", "--no-scheduler",
           "--master_port", next_port(), "--log_dir", str(tmp_path / "logs"),
           TORCH_TRAIN, "--steps", "4", "--out", str(tmp_path / "out")]
    proc = subprocess.run(cmd, env=clean_env(), cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "[rank1] TORCH_TRAIN_OK rank=1 size=2" in proc.stdout
    reference(sys.executable, TORCH_TRAIN, tmp_path, 4)
    compare_params.check(str(tmp_path / "out"), 2, reference=True, steps=4)


# ---------------------------------------------------------------- faults (MindSpore)

def find_child(launcher_pid, role, rank=None):
    """The framework process (not the adapter) with MS_ROLE=role (and RANK_ID=rank)."""
    for p in descendants(launcher_pid):
        try:
            cmd = p.cmdline()
            if MS_TRAIN not in cmd or "mpilaunch.rank" in cmd:
                continue
            env = p.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if env.get("MS_ROLE") == role and (rank is None or env.get("RANK_ID") == str(rank)):
            return p
    return None


def steps_done(tmp_path, rank):
    path = tmp_path / "out" / f"params_rank{rank}.jsonl"
    return path.read_text().count("\n") if path.exists() else 0


class Job:
    def __init__(self, mpirun, tmp_path, *script_args):
        self.tmp_path = tmp_path
        self.proc = subprocess.Popen(ms_launch(mpirun, tmp_path, *script_args), env=clean_env(), cwd=tmp_path,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.seen = []

    def wait_training(self, step=2, timeout=120):
        ok = wait_for(lambda: steps_done(self.tmp_path, 0) >= step and steps_done(self.tmp_path, 1) >= step, timeout, 0.2)
        self.seen = descendants(self.proc.pid)
        assert ok, "training did not reach step %d" % step
        return self.seen

    def finish(self, timeout):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            kill_all(self.seen + descendants(self.proc.pid))
            self.proc.kill()
        return out, err


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
@pytest.mark.parametrize("role, rank, label", [("MS_WORKER", 1, "rank 1 (worker)"), ("MS_SCHED", None, "(scheduler)")])
def test_killed_worker_or_scheduler_ends_the_job(role, rank, label, tmp_path):
    job = Job(OMPI5, tmp_path, "--steps", "60", "--sleep-per-step", "1")
    try:
        job.wait_training()
        victim = find_child(job.proc.pid, role, rank)
        assert victim is not None
        victim.kill()
        t0 = time.monotonic()
        out, err = job.finish(timeout=60)
        took = time.monotonic() - t0
    finally:
        kill_all(job.seen)
    assert job.proc.returncode == 137, err[-2000:]
    assert f"root cause: " in err and label in err, err[-2000:]
    assert "killed by signal 9 (SIGKILL)" in err
    assert took < 20, f"the job took {took:.1f}s to end after the kill"
    assert wait_gone(job.seen, 10) == []


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
def test_worker_failing_after_cluster_init_ends_the_job(tmp_path):
    """Rank 1 exits 7 at step 3, after MindSpore's init(): no 30 s heartbeat wait."""
    job = Job(OMPI5, tmp_path, "--steps", "60", "--sleep-per-step", "0.5", "--fail-at-step", "3",
              "--fail-rank", "1", "--exit-code", "7")
    try:
        job.wait_training(step=1)
        t0 = time.monotonic()
        out, err = job.finish(timeout=90)
        took = time.monotonic() - t0
    finally:
        kill_all(job.seen)
    assert job.proc.returncode == 7, err[-2000:]
    assert "root cause: rank 1 (worker)" in err and "exit code 7" in err
    assert took < 20
    assert wait_gone(job.seen, 10) == []


@pytest.mark.slow
@pytest.mark.mindspore
@needs_ms
def test_interrupted_launcher_ends_training(tmp_path):
    job = Job(OMPI5, tmp_path, "--steps", "60", "--sleep-per-step", "1")
    try:
        job.wait_training()
        job.proc.send_signal(signal.SIGINT)
        out, err = job.finish(timeout=60)
    finally:
        kill_all(job.seen)
    assert job.proc.returncode == 130, err[-2000:]
    assert wait_gone(job.seen, 10) == []
