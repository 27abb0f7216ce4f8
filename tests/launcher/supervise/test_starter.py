"""starter.run_attempt supervises any backend through the Backend protocol alone: a backend of a few
lines (tests/helpers/toy.py; its starter a real Python process) is written, started, watched and cleaned up
exactly as Open MPI, Hydra and srun are, and the job's status is the root cause's."""
import os
import signal
import sys
import time

from mpilaunch.supervise import starter
from mpilaunch.supervise.attempt import Attempt
from mpilaunch.contract import STATUS_PREFIX
from helpers.procs import wait_for
from helpers.toy import Toy, toy_plan


def run(tmp_path, plan, backend=None):
    backend = backend or Toy()
    run_dir = str(tmp_path / "run")
    os.makedirs(run_dir, mode=0o700)
    t0 = time.monotonic()
    status = starter.run_attempt(backend, plan, dict(os.environ), run_dir, False, Attempt())
    return status, backend, time.monotonic() - t0, run_dir


def test_status_is_the_root_causes_not_the_starters(tmp_path, capfd):
    run_dir = str(tmp_path / "run")
    status, toy, _, _ = run(tmp_path, toy_plan(run_dir, [[1, 5, "self"], [0, 143, "terminated"]], rc=143))
    out, err = capfd.readouterr()
    assert status == 5
    assert "starter output" in out
    assert STATUS_PREFIX not in err                      # status lines are taken out
    assert "mpilaunch: job failed (exit status 5)\n  root cause: rank 1 (worker) on host h: exit code 5\n" in err
    assert toy.calls[0][0] == "failure" and toy.calls[-1][0] == "cleanup"
    assert [c[0] for c in toy.calls].count("failure") == 1


def test_the_backends_files_are_written_private_and_removed(tmp_path):
    seen = {}

    class Peek(Toy):
        def watch(self, plan, job):
            st = os.stat(plan.hostfile_path)
            seen["mode"], seen["text"] = st.st_mode & 0o777, open(plan.hostfile_path).read()

    run_dir = str(tmp_path / "run")
    status, _, _, run_dir = run(tmp_path, toy_plan(run_dir, []), Peek())
    assert status == 0
    assert seen == {"mode": 0o600, "text": "h slots=1\n"}
    assert not os.path.exists(run_dir)                   # nothing of the job left


def test_a_backend_that_ends_the_job_at_the_first_failure(tmp_path):
    """The starter would run 60 s: the backend's on_rank_failure ends it (Job.end: SIGTERM)."""
    run_dir = str(tmp_path / "run")
    status, toy, took, _ = run(tmp_path, toy_plan(run_dir, [[2, 7, "self"]], sleep=60))
    assert status == 7
    assert took < 10, took
    assert toy.calls[-1][2] == -signal.SIGTERM            # cleanup saw how the starter ended


def test_the_starters_own_status_without_a_report(tmp_path):
    run_dir = str(tmp_path / "run")
    status, _, _, _ = run(tmp_path, toy_plan(run_dir, [], rc=3))
    assert status == 3


def test_job_end_is_sent_once(tmp_path):
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                             "signal.signal(signal.SIGTERM, lambda *a: print('term', flush=True))\n"
                             "print('ready', flush=True)\n"
                             "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"     # its SIGTERM handler is in place
        job = starter.Job(proc, None, "toy")
        job.end(escalate=1.0)
        job.end(escalate=1.0)                             # a second end sends nothing more
        assert proc.wait(timeout=10) == -signal.SIGKILL  # it ignored SIGTERM: escalated
        assert proc.stdout.read().count("term") == 1
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_signal_taken_by_another_thread_is_handled_while_the_starter_runs():
    """The kernel gives a process's signal to another of its threads when the main thread
    already has one pending (Slurm's SIGCONT then SIGUSR1); Python runs the handler in the
    main thread only, so while that thread waited in waitpid the handler ran only when the
    starter ended. Here the signal is sent to another thread outright."""
    import subprocess
    import threading

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    handled = []

    def on_usr1(signum, frame):
        handled.append(threading.current_thread() is threading.main_thread())
        proc.kill()

    def main_thread_waits():
        with open(f"/proc/self/task/{threading.main_thread().native_id}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "S"

    def send_to_this_thread():
        wait_for(main_thread_waits, 10, 0.01)       # blocked in the wait (a sleeping state)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, on_usr1)
    other = threading.Thread(target=send_to_this_thread)
    try:
        t0 = time.monotonic()
        other.start()
        assert starter.wait_starter(proc) == -signal.SIGKILL
        assert time.monotonic() - t0 < 10        # not the starter's own 30 s
        assert handled == [True]
    finally:
        signal.signal(signal.SIGUSR1, previous)
        other.join(5)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
