"""Slurm's signals and stop sequence reach mpilaunch's workers as they reach a bare launcher's
(docs/SIGNALS.md), inside a real Slurm (tests/helpers/slurm/: one node, 4 task slots,
KillWait=5 s), 2 ranks of tests/helpers/sigworker.py, through mpirun (Open MPI 5, and 4.1 where
it differs) and ``--launcher srun``; the jobs of one test run side by side:

* ``sbatch --signal=B:USR1@N`` (the batch shell, i.e. mpilaunch) and ``--signal=USR1@N`` (the
  job's steps only: srun's tasks, and under mpirun on one node no process at all, as bare),
  made due once every worker's handler is in place (``_Jobs.make_due``);
* ``scancel --signal=USR1 --full``: every worker's handler once;
* ``scancel`` (SIGTERM to every process, SIGKILL KillWait later) with ``--term-grace`` shorter
  than KillWait: every save completes (Open MPI 4.1's own mpirun, signalled too, kills its
  ranks after 2 s; ``scancel --batch --signal=TERM`` gives it the grace);
* ``scontrol suspend`` / ``resume``: the job goes on, ``--stall-timeout`` does not call it
  stalled; ``scontrol requeue``: the new run starts clean (no run dir, no session dir left);
* the time limit (60 s and more: kept out of CI, ``MPILAUNCH_LONG_TESTS=1`` runs it).

Marked ``slow`` and ``slurm``."""
import os
import shlex
import signal
import sys
import time

import psutil
import pytest

from helpers import REPO
from helpers import sigworker
from helpers.launch import clean_env
from helpers.mpis import OMPI4, OMPI5_MPIRUN as OMPI5

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

LONG = pytest.mark.skipif(not os.environ.get("MPILAUNCH_LONG_TESTS"),
                          reason="a Slurm time limit takes 60 s and more: out of CI "
                                 "(MPILAUNCH_LONG_TESTS=1 runs it)")


def _script(out, launch, mode, steps, *args, **env):
    argv = [sys.executable, "-m", "mpilaunch", "--no-scheduler", "--master_port", "0",
            "--log_dir", os.path.join(out, "logs"), *launch, *args, sigworker.PATH, out, mode,
            str(steps)]
    exports = "".join("export %s=%s\n" % (k, shlex.quote(str(v))) for k, v in env.items())
    return "cd %s\n%sexec %s\n" % (shlex.quote(REPO), exports, " ".join(shlex.quote(a) for a in argv))


def _launch(name):
    return {"ompi5": ["--mpirun", OMPI5], "ompi4": ["--mpirun", OMPI4.mpirun],
            "srun": ["--launcher", "srun"]}[name]


_SUBMITTED = []     # every _Jobs of the running test, for _no_job_outlives_its_test

# ``--signal=[B:]SIG@W`` is not sent at a time a test can choose: slurmctld looks at the time
# limits every 30 s and sends the warning (SIGCONT first, then SIG) at the first look that finds
# the job's end within W + 30 s, so up to 60 s before it is due (sbatch(1)); due 10 s after the
# start it may come before the workers have their handlers. So the jobs are submitted with a
# limit that keeps the warning far off (due 270 s after the start), and once every worker's
# handler is in place (and every adapter is on the control channel, which SIGCONT takes under
# srun) the limit is shortened so that the next look sends it. That pair, two signals at once,
# is what once cost the workers their USR1 in a loaded full run, a launcher bug
# (mpilaunch/supervise/starter.py, wait_starter, says why): these tests hold it too.
WARN_LIMIT = ("-t", "10")
WARN_AT = 300           # s before the end
DUE_LIMIT = "5"         # min: the end 300 s after the start, WARN_AT before it: due at once


def _warning(sig):
    """sbatch options: a ``--signal`` warning that only :meth:`_Jobs.make_due` makes due."""
    return (*WARN_LIMIT, f"--signal={sig}@{WARN_AT}")


class _Jobs:
    """Jobs submitted side by side; each has its out dir and its output file."""

    def __init__(self, cluster, tmp_path):
        self.cluster, self.tmp = cluster, tmp_path
        self.env = cluster.env(clean_env())
        self.jobs = {}
        _SUBMITTED.append(self)

    def submit(self, name, mode, steps, *args, opts=(), tasks=("-n2",), **env):
        out = self.tmp / name
        out.mkdir(mode=0o777)
        job, _, log = self.cluster.sbatch(_script(str(out), _launch(name.split("-")[0]), mode, steps,
                                                  *args, **env), [*tasks, *opts], env=self.env,
                                          wait=False)
        self.jobs[name] = (job, out, log)
        return job, out

    def wait_up(self, timeout=90):
        deadline = time.monotonic() + timeout
        for name, (job, out, log) in self.jobs.items():
            while not sigworker.all_exist(out, "up", 2):
                assert time.monotonic() < deadline, (name, self.text(name))
                time.sleep(0.1)

    def wait_channel(self, *names, timeout=10):
        """Until each job's (or each of ``names``') mpilaunch has both adapters on its control
        channel: a stop before that reaches the adapters only as Slurm's own signal."""
        deadline = time.monotonic() + timeout
        for name, (job, out, log) in self.jobs.items():
            if names and name not in names:
                continue
            pids = _pids(self.cluster, lambda a: a[1:3] == ["-m", "mpilaunch"] and
                         any(str(out) in x for x in a))
            while not pids or sigworker.channel_peers(pids[0]) < 2:
                assert time.monotonic() < deadline, (name, pids, self.text(name))
                time.sleep(0.1)
                pids = pids or _pids(self.cluster, lambda a: a[1:3] == ["-m", "mpilaunch"] and
                                     any(str(out) in x for x in a))

    def make_due(self, *names):
        """Shorten the time limit of each of ``names`` (submitted with :func:`_warning`) so that
        its warning is due: slurmctld sends it at its next look, within 30 s. In this order: a
        look that sends the last one's has found the others' due too."""
        for name in names:
            self.run(name, "scontrol", "update", "JobId=JOB", "TimeLimit=" + DUE_LIMIT)

    def wait_state(self, name, state, timeout=60):
        deadline = time.monotonic() + timeout
        while self.record(name)[0] != state:
            assert time.monotonic() < deadline, (name, self.record(name), self.text(name))
            time.sleep(0.2)

    def run(self, name, *argv):
        job = self.jobs[name][0]
        r = self.cluster.run([a.replace("JOB", job) for a in argv], env=self.env)
        assert r.returncode == 0, r.stderr

    def wait_all(self, timeout=120):
        for name, (job, out, log) in self.jobs.items():
            assert self.cluster.wait_gone(job, timeout), (name, self.text(name))

    def text(self, name):
        log = self.jobs[name][2]
        return open(log).read() if os.path.exists(log) else ""

    def record(self, name):
        return self.cluster.job_record(self.jobs[name][0])

    def out(self, name):
        return self.jobs[name][1]


@pytest.fixture(autouse=True)
def _no_job_outlives_its_test(tmp_path):
    """The Slurm is the session's: a failed test must not leave a job running, suspended or
    requeued (it would hold the task slots the next tests need), nor a worker of its own."""
    yield
    while _SUBMITTED:
        jobs = _SUBMITTED.pop()
        for job, _, _ in jobs.jobs.values():
            try:
                if jobs.cluster.run(["squeue", "-h", "-j", job], env=jobs.env,
                                    timeout=10).stdout.strip():
                    jobs.cluster.run(["scontrol", "resume", job], env=jobs.env, timeout=10)
                    jobs.cluster.run(["scancel", job], env=jobs.env, timeout=10)
                    jobs.cluster.wait_gone(job, 30)
            except Exception:       # a Slurm that no longer answers: its fixture's stop() ends it
                pass
    for p in psutil.process_iter(["cmdline"]):      # this test's workers, by their out dir
        try:
            if any(str(tmp_path) in a for a in p.info["cmdline"] or []):
                p.kill()
        except psutil.Error:
            pass


def _left(cluster, timeout=10):
    deadline = time.monotonic() + timeout
    while cluster.job_pids() and time.monotonic() < deadline:
        time.sleep(0.2)
    return cluster.job_pids()


def test_batch_signal_reaches_every_worker_once(slurm_cluster, tmp_path):
    """``--signal=B:USR1@N``, made due once the workers are up: sent to the batch shell
    (mpilaunch, exec'd by it), SIGCONT first, which gives both to every worker; the job then
    completes."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    for name in ("ompi5", "srun"):
        jobs.submit(name, "handle", 900, opts=_warning("B:USR1"), END_AFTER="SIGUSR1")
    jobs.wait_up()
    jobs.wait_channel("srun")
    jobs.make_due("ompi5", "srun")
    jobs.wait_all(timeout=150)
    for name, program in (("ompi5", "mpirun"), ("srun", "srun")):
        text = jobs.text(name)
        assert sigworker.counts(jobs.out(name), "SIGUSR1", 2) == [1, 1], text
        assert sigworker.counts(jobs.out(name), "SIGCONT", 2) == [1, 1], text
        assert jobs.record(name) == ("COMPLETED", "0:0"), text
        assert f"mpilaunch: SIGUSR1 received: forwarded to every rank by {program}" in text
    assert _left(slurm_cluster) == []


def test_step_signal_reaches_srun_tasks_and_under_mpirun_no_one(slurm_cluster, tmp_path):
    """``--signal=USR1@N`` (no ``B:``), made due once the workers are up, signals the job's
    steps only: every process of srun's step, so each worker once, and the adapters survive it;
    under mpirun on one node there is no step, and no worker gets it (bare mpirun's ranks
    neither). Both jobs' warnings are sent by the same look of slurmctld's (``make_due``); the
    mpirun job is ended (a file its workers look for) 3 s after the srun job's workers got it,
    time for a wrong delivery to show."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    opts = _warning("USR1")
    jobs.submit("srun", "handle", 0, opts=opts, END_AFTER="SIGUSR1")
    jobs.submit("ompi5", "handle", 0, opts=opts)
    jobs.wait_up()
    jobs.make_due("ompi5", "srun")
    deadline = time.monotonic() + 120
    while sigworker.counts(jobs.out("srun"), "SIGUSR1", 2) != [1, 1]:
        assert time.monotonic() < deadline, jobs.text("srun")
        time.sleep(0.2)
    time.sleep(3)
    (jobs.out("ompi5") / "end").touch()
    jobs.wait_all()
    assert jobs.record("srun") == ("COMPLETED", "0:0"), jobs.text("srun")
    assert sigworker.counts(jobs.out("srun"), "SIGUSR1", 2) == [1, 1]
    assert "SIGUSR1 received" not in jobs.text("srun")      # not through mpilaunch
    assert jobs.record("ompi5") == ("COMPLETED", "0:0"), jobs.text("ompi5")
    assert sigworker.counts(jobs.out("ompi5"), "SIGUSR1", 2) == [0, 0]
    assert _left(slurm_cluster) == []


def _argv(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().split("\0")
    except OSError:
        return []


def _pids(cluster, test):
    """The job's processes whose argv passes ``test``."""
    return [pid for pid in cluster.job_pids() if test(_argv(pid))]


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_srun_user_signals_reach_every_worker_once(slurm_cluster, tmp_path):
    """``--launcher srun``, as tests/e2e/test_signals.py does with mpirun and mpiexec, under
    ``--term-grace 8`` (``--stall-timeout`` is not offered with srun): SIGUSR1 and SIGUSR2 to mpilaunch (srun
    forwards both) and to srun itself, each worker's handler once per signal; SIGTSTP to
    mpilaunch stops every worker for 3 s (srun would stop only itself: the adapters stop their
    workers), SIGCONT resumes them; then SIGTERM to
    mpilaunch gives every worker SIGTERM and the grace over the control channel: each 2 s save
    completes, exit 143."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    _, out = jobs.submit("srun", "save", 0, "--term-grace", "8")
    jobs.wait_up()
    launcher, = _pids(slurm_cluster, lambda a: a[1:3] == ["-m", "mpilaunch"])
    srun, = [p for p in _pids(slurm_cluster, lambda a: os.path.basename(a[0]) == "srun")
             if psutil.Process(p).ppid() == launcher]       # not srun's own helper child
    workers = _pids(slurm_cluster, lambda a: a[1:2] == [sigworker.PATH])
    assert len(workers) == 2
    sent = {"SIGUSR1": 0, "SIGUSR2": 0}
    for pid, sig in ((launcher, signal.SIGUSR1), (launcher, signal.SIGUSR2),
                     (srun, signal.SIGUSR1), (srun, signal.SIGUSR2)):
        os.kill(pid, sig)
        sent[sig.name] += 1
        want = sent[sig.name]
        deadline = time.monotonic() + 10
        while sigworker.counts(out, sig.name, 2) != [want, want]:
            assert time.monotonic() < deadline, (pid, sig, jobs.text("srun"))
            time.sleep(0.1)
        time.sleep(0.3)
        assert sigworker.counts(out, sig.name, 2) == [want, want], (pid, sig)
    assert not any((out / f"saving_{r}").exists() for r in range(2))   # not a stop
    os.kill(launcher, signal.SIGTSTP)
    deadline = time.monotonic() + 10
    while [_state(p) for p in workers] != ["T", "T"]:
        assert time.monotonic() < deadline, jobs.text("srun")
        time.sleep(0.1)
    before = [sigworker.steps(out, r) for r in range(2)]
    time.sleep(3)
    assert [sigworker.steps(out, r) for r in range(2)] == before
    os.kill(launcher, signal.SIGCONT)
    deadline = time.monotonic() + 10
    while not all(sigworker.steps(out, r) > before[r] + 5 for r in range(2)):
        assert time.monotonic() < deadline, jobs.text("srun")
        time.sleep(0.1)
    os.kill(launcher, signal.SIGTERM)
    jobs.wait_all()
    text = jobs.text("srun")
    assert sigworker.counts(out, "SIGCONT", 2) == [1, 1]
    assert sigworker.all_exist(out, "saved", 2), text
    assert jobs.record("srun") == ("FAILED", "143:0"), text
    assert "ended within the grace: rank 0, rank 1" in text, text
    assert "mpilaunch: SIGUSR2 received: forwarded to every rank by srun" in text
    assert "mpilaunch: SIGTSTP received: sent to every rank's adapter, for its workers" in text
    assert _left(slurm_cluster) == []


def test_scancel_signal_full_reaches_every_worker_once(slurm_cluster, tmp_path):
    """``scancel --signal=USR1 --full``: Slurm signals the batch shell's process group
    (mpilaunch; mpirun and srun run in their own) and every process of srun's step. Each worker
    gets it once, as under bare mpirun (measured there: once per rank)."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    for name in ("ompi5", "srun"):
        jobs.submit(name, "handle", 0, END_AFTER="SIGUSR1")
    jobs.wait_up()
    for name in ("ompi5", "srun"):
        jobs.run(name, "scancel", "--signal=USR1", "--full", "JOB")
    jobs.wait_all()
    for name in ("ompi5", "srun"):
        assert sigworker.counts(jobs.out(name), "SIGUSR1", 2) == [1, 1], jobs.text(name)
        assert jobs.record(name) == ("COMPLETED", "0:0"), jobs.text(name)
    assert _left(slurm_cluster) == []


@pytest.mark.skipif(OMPI4.missing() is not None, reason=str(OMPI4.missing()))
def test_scancel_with_a_grace_shorter_than_killwait_lets_every_save_complete(slurm_cluster, tmp_path):
    """``scancel``: SIGCONT + SIGTERM to every process of the job, SIGKILL KillWait (5 s) later.
    With ``--term-grace 4`` each worker's 3 s save completes under srun and Open MPI 5 (whose
    prterun, signalled too, leaves its ranks at once: mpilaunch waits for them). Open MPI 4.1's
    mpirun, signalled too, kills its ranks 2 s later, as it does without mpilaunch: that save
    is cut, and ``scancel --batch --signal=TERM`` (mpilaunch alone) gives it the grace."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    for name in ("ompi5", "srun"):
        jobs.submit(name, "save", 0, "--term-grace", "4", SAVE_SECONDS=3)
    jobs.wait_up()
    jobs.wait_channel()
    t0 = time.monotonic()
    for name in ("ompi5", "srun"):
        jobs.run(name, "scancel", "JOB")
    jobs.wait_all()
    took = time.monotonic() - t0
    for name in ("ompi5", "srun"):
        text = jobs.text(name)
        assert sigworker.all_exist(jobs.out(name), "saved", 2), text
        assert jobs.record(name)[0] == "CANCELLED", text
        assert "scheduler: Slurm job %s: cancelled by the scheduler (scancel)" % jobs.jobs[name][0] in text
    assert took < 3 + 5, took        # the saves, not KillWait's SIGKILL, ended both jobs
    assert _left(slurm_cluster) == []

    jobs = _Jobs(slurm_cluster, tmp_path / "ompi4")
    (tmp_path / "ompi4").mkdir()
    jobs.submit("ompi4-cut", "save", 0, "--term-grace", "4", SAVE_SECONDS=3)
    jobs.submit("ompi4-batch", "save", 0, "--term-grace", "4", SAVE_SECONDS=3)
    jobs.wait_up()
    jobs.wait_channel()
    jobs.run("ompi4-cut", "scancel", "JOB")
    jobs.run("ompi4-batch", "scancel", "--batch", "--signal=TERM", "JOB")
    jobs.wait_all()
    cut, batch = jobs.out("ompi4-cut"), jobs.out("ompi4-batch")
    assert sigworker.all_exist(cut, "saving", 2) and not any(
        (cut / f"saved_{r}").exists() for r in range(2)), jobs.text("ompi4-cut")
    assert sigworker.all_exist(batch, "saved", 2), jobs.text("ompi4-batch")
    assert "ended within the grace: rank 0, rank 1" in jobs.text("ompi4-batch")
    assert _left(slurm_cluster) == []


def test_suspend_and_resume_keep_the_job_and_it_is_not_stalled(slurm_cluster, tmp_path):
    """``scontrol suspend`` (SIGTSTP and SIGSTOP to the job's processes), then, 3 s after
    every worker is stopped, ``resume``: every worker goes on; the job completes with all its
    steps, and under ``--stall-timeout 2`` (mpirun: measured with mpirun only) is not called
    stalled."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    jobs.submit("ompi5", "handle", 40, "--stall-timeout", "2")
    jobs.submit("srun", "handle", 40)
    jobs.wait_up()
    workers = _pids(slurm_cluster, lambda a: a[1:2] == [sigworker.PATH])
    assert len(workers) == 4, workers
    for name in ("ompi5", "srun"):
        jobs.run(name, "scontrol", "suspend", "JOB")
    deadline = time.monotonic() + 30        # slurmctld -> slurmd -> slurmstepd: stopped
    while [_state(p) for p in workers] != ["T"] * 4:
        assert time.monotonic() < deadline, [_state(p) for p in workers]
        time.sleep(0.1)
    before = {n: [sigworker.steps(jobs.out(n), r) for r in range(2)] for n in ("ompi5", "srun")}
    time.sleep(3)
    assert {n: [sigworker.steps(jobs.out(n), r) for r in range(2)] for n in before} == before
    for name in ("ompi5", "srun"):
        jobs.run(name, "scontrol", "resume", "JOB")
    jobs.wait_all()
    for name in ("ompi5", "srun"):
        text = jobs.text(name)
        assert jobs.record(name) == ("COMPLETED", "0:0"), text
        assert [sigworker.steps(jobs.out(name), r) for r in range(2)] == [40, 40]
        assert "stalled" not in text
    assert _left(slurm_cluster) == []


def test_requeue_starts_clean(slurm_cluster, tmp_path):
    """``scontrol requeue`` of a running job (``sbatch --requeue``): Slurm ends the run
    (SIGTERM to every process) and starts the batch script again; the new run (its
    ``SLURM_RESTART_COUNT`` 1) starts and completes, and no run dir or Open MPI session dir of
    either run is left in the job's TMPDIR."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    tmpdirs = {}
    for name in ("ompi5", "srun"):
        tmpdirs[name] = tmp_path / (name + "-tmp")
        tmpdirs[name].mkdir(mode=0o755)
        jobs.submit(name, "handle", 0, opts=("--requeue",), TMPDIR=tmpdirs[name], STEPS_1=10)
    jobs.wait_up()
    for name in ("ompi5", "srun"):
        assert os.listdir(tmpdirs[name]) != []            # the first run's run dir
        jobs.run(name, "scontrol", "requeue", "JOB")
    for name in ("ompi5", "srun"):
        # a requeued job waits ~2 minutes (its launch credential's lifetime) unless released;
        # that begin time is set once the first run has ended (COMPLETING, REQUEUED, then
        # PENDING): a release before then is overwritten. The release is to the next second:
        # the requeue revoked the job's credential on slurmd at the requeue's second, and slurmd
        # refuses a new one made in that same second (its time is in whole seconds: "Job N
        # already killed, do not launch batch job", the job then FAILED 1:0 without a run),
        # which a StartTime=now right after the requeue gave under load
        jobs.wait_state(name, "PENDING")
        jobs.run(name, "scontrol", "update", "JobId=JOB", "StartTime=now+1")
    jobs.wait_all()
    for name in ("ompi5", "srun"):
        out = jobs.out(name)
        # the daemons' logs too: a run slurmd refused to start leaves nothing in the job's text
        assert jobs.record(name) == ("COMPLETED", "0:0"), (jobs.text(name), slurm_cluster.logs())
        assert [(out / f"up_{r}").read_text().split() for r in range(2)] == [["-", "1"]] * 2
        assert sigworker.all_exist(out, "done", 2)
        assert os.listdir(tmpdirs[name]) == [], name
    assert _left(slurm_cluster) == []


@LONG
def test_time_limit_lets_every_save_complete(slurm_cluster, tmp_path):
    """``-t 1``: at the limit Slurm sends SIGTERM to every process, SIGKILL KillWait later;
    with ``--term-grace 4`` each worker's 3 s save completes (srun, Open MPI 5)."""
    jobs = _Jobs(slurm_cluster, tmp_path)
    for name in ("ompi5", "srun"):
        jobs.submit(name, "save", 0, "--term-grace", "4", opts=("-t", "1"), SAVE_SECONDS=3)
    jobs.wait_all(timeout=200)
    for name in ("ompi5", "srun"):
        text = jobs.text(name)
        assert sigworker.all_exist(jobs.out(name), "saved", 2), text
        assert jobs.record(name)[0] == "TIMEOUT", text
        assert "time limit reached" in text
    assert _left(slurm_cluster) == []


# --------------------------------------------------------------------------- two nodes

TWO_NODES = ("-N2", "--ntasks-per-node=1")


@pytest.mark.multinode
def test_two_nodes_batch_signal_and_scancel_with_a_grace(slurm_nodes, tmp_path):
    """On 2 nodes (one rank each; tests/helpers/slurm/multinode.py), both launch paths side by
    side: ``--signal=B:USR1@N``, made due once every worker's handler is in place and srun's
    adapters are on the control channel, reaches the worker on each node once, SIGCONT first
    (USR1: srun's tasks directly by srun, mpirun's through its daemon on the other node; SIGCONT:
    srun's over the control channel); then, with ``--term-grace 4`` and 3 s
    saves, ``scancel`` (srun) and ``scancel --batch --signal=TERM`` (mpirun): every save on
    both nodes completes; a plain ``scancel`` under mpirun cuts a save (prted, signalled too,
    ends). Nothing is left on either node."""
    jobs = _Jobs(slurm_nodes, tmp_path)
    for name in ("ompi5", "srun"):
        jobs.submit(name, "handle", 900, tasks=TWO_NODES, opts=_warning("B:USR1"),
                    END_AFTER="SIGUSR1")
    jobs.wait_up()
    jobs.wait_channel("srun")
    jobs.make_due("ompi5", "srun")
    jobs.wait_all(timeout=150)
    for name in ("ompi5", "srun"):
        text = jobs.text(name)
        assert sigworker.counts(jobs.out(name), "SIGUSR1", 2) == [1, 1], text
        assert sigworker.counts(jobs.out(name), "SIGCONT", 2) == [1, 1], text
        assert jobs.record(name) == ("COMPLETED", "0:0"), text
    jobs = _Jobs(slurm_nodes, tmp_path / "grace")
    (tmp_path / "grace").mkdir()
    for name in ("ompi5", "srun"):
        jobs.submit(name, "save", 0, "--term-grace", "4", tasks=TWO_NODES, SAVE_SECONDS=3)
    jobs.wait_up()
    jobs.wait_channel()
    jobs.run("srun", "scancel", "JOB")
    jobs.run("ompi5", "scancel", "--batch", "--signal=TERM", "JOB")
    jobs.wait_all()
    for name in ("ompi5", "srun"):
        text = jobs.text(name)
        assert sigworker.all_exist(jobs.out(name), "saved", 2), (name, text)
    assert jobs.record("srun")[0] == "CANCELLED", jobs.text("srun")
    assert "ended within the grace: rank 0, rank 1" in jobs.text("ompi5")
    # a plain scancel under mpirun: every process of the job is signalled, prted (Open MPI's
    # daemon on the other node) too, and the save there does not complete (measured)
    jobs = _Jobs(slurm_nodes, tmp_path / "plain")
    (tmp_path / "plain").mkdir()
    _, out = jobs.submit("ompi5", "save", 0, "--term-grace", "4", tasks=TWO_NODES, SAVE_SECONDS=3)
    jobs.wait_up()
    jobs.wait_channel()
    jobs.run("ompi5", "scancel", "JOB")
    jobs.wait_all()
    saved = [(out / f"saved_{r}").exists() for r in range(2)]
    assert sigworker.all_exist(out, "saving", 2) and saved != [True, True], jobs.text("ompi5")
    assert _left(slurm_nodes) == []
