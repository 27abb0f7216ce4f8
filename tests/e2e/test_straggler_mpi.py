"""The straggler rule on mpi4py ranks under Open MPI 5 (docs/MONITOR.md, "The straggler rule"):
2 ranks on this 2-core machine, supervised (the monitor needs the adapters: no ``--exec``), an
``Allreduce`` per step. Open MPI's ranks spin while they wait, so their CPU cannot tell them
apart: the stack samples do (rank/collectives.py counts a user's line that calls
``comm.Allreduce(`` or ``comm.allreduce(`` as waiting in a collective). The slow variant's rank 1
sleeps 40 ms a step in ``read_shard`` (a slow disk: idle, as much a straggler as a busy rank);
the launcher names it, with that frame, within six monitor intervals of the steps' start,
prints its line and lists it at the job's end; the same
job balanced, run for as many rounds, names no one. Nothing of either job is left running.

Why this setup (docs/MONITOR.md, "mpi4py ranks": scores replayed from every round of 3-9
jobs of each kind, on this 2-core machine with other jobs keeping the load at 5-10):

* 2 ranks, a core each. With 3, the ranks spinning in ``Allreduce`` hold the cores and the late
  rank, once it arrives, waits to be scheduled: its own wait share 0.34-0.90, its score
  0.12-0.48 (named, recovered, named again). With 2, its share is 0-0.37 and its score when
  named 0.44-0.93.
* 10 s, not the default 5 s: at 5 s a balanced pair scored up to 0.28 (16 rounds), at 10 s
  up to 0.15 (22 rounds); the line is 0.30. With two ranks the others' median is one rank, so
  whichever rank another process (adapter, py-spy, another job) delays is for that while the
  straggler; 59 stack samples a round even that out, 29 barely.
* ~6 ms of numpy a step: with steps of 0.2-0.4 ms, such pauses named a balanced rank (0.47).
"""
import re
import socket

import pytest

from helpers.mpis import ALL
from helpers.procs import alive, descendants, wait_for
from helpers.straggler import Job, jobs, needs_py_spy, records  # noqa: F401 (jobs: a fixture)

from mpilaunch.monitor import board, straggler

INTERVAL = 10       # s: ~59 stack samples a round (above: why not 5, the default)
ROUNDS = 4          # rounds after the steps began: the start-up's and 3 judged (the slow rank: 3)
OMPI5 = [m for m in ALL if m.id == "ompi5"]

MPI4PY = r'''
import os, sys, time
import numpy as np
from mpi4py import MPI

out, slow = sys.argv[1], int(sys.argv[2])
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
w = np.random.default_rng(0).random((256, 256)) / 256


def read_shard(step):
    if rank == slow:
        time.sleep(0.04)
    return np.ones((256, 256))


def forward(x):
    for _ in range(8):      # ~6 ms of one core
        x = np.tanh(x @ w)
    return x


def train():
    step, total = 0, np.zeros((256, 256))
    while True:
        y = forward(read_shard(step))
        comm.Allreduce(y, total)
        step += 1
        if rank == 0 and step == 1:     # every rank has reached its first step
            with open(os.path.join(out, "training"), "w") as f:
                f.write(repr(time.time()))
        if comm.allreduce(os.path.exists(os.path.join(out, "stop")), op=MPI.LOR):
            return


train()
'''


def _stop(job):
    """Stop the job; -> (exit status, stderr), once nothing it started is left."""
    kids = descendants(job.proc.pid)
    rc, err = job.stop()
    assert wait_for(lambda: not alive(kids), 20), alive(kids)
    return rc, err


@needs_py_spy
@pytest.mark.parametrize("mpi", OMPI5)
def test_mpi4py_slow_rank_is_named_with_its_frame(tmp_path, jobs, mpi):
    job = Job(tmp_path, MPI4PY, slow=1, name="slow", np=2, mpi=mpi, interval=INTERVAL)
    jobs.append(job)
    t0 = job.training_since()
    named = wait_for(lambda: records(job.logs, "straggler") or job.proc.poll() is not None,
                     timeout=20 * INTERVAL)
    rc, err = _stop(job)
    assert rc == 0, err
    assert named and named is not True, f"no straggler named:\n{err}"
    first = records(job.logs, "straggler")[0]
    host = socket.gethostname()
    assert (first["rank"], first["host"], first["recovered"]) == (1, host, False), first
    assert first["score"] >= 0.30 and first["others_wait"] > first["wait_share"], first
    assert re.fullmatch(r"train\.py:\d+ in read_shard", first["hot_frame"] or ""), first
    # the first round with stack samples comes 2-4 intervals after the steps began (a worker's
    # first sample has none; later under load) and holds the start-up; the sleeping rank's
    # Allreduce finds the other there, so its samples may never catch it in one, and a rank
    # never seen waiting is judged once it has lagged LAST_ROUNDS rounds; then PERSIST rounds
    # in a row name it (mpilaunch/monitor/board.py, straggler.py): seen 40 s after the first
    # sampled round, 67-88 s after the steps began
    sampled = records(job.logs, "wait_share")[0]["t"]
    rounds = board.LAST_ROUNDS + straggler.PERSIST
    assert first["t"] - sampled <= (rounds + 1) * INTERVAL, (first["t"] - sampled, first["t"] - t0, first)
    line = re.search(r"^mpilaunch: rank 1 on host (\S+) is holding the job back: others wait "
                     r"(\d+)% of the time for it; its time goes to (.+)$", err, re.M)
    assert line and line.group(1) == host, err
    assert re.fullmatch(r"train\.py:\d+ in read_shard", line.group(3)), err
    assert int(line.group(2)) == round(first["others_wait"] * 100)
    assert re.search(r"^mpilaunch: 1 straggler\(s\) seen\n  rank 1 on host \S+: held the job back "
                     r"\d+ s", err, re.M), err
    # named once and never recovered: it is slow every step
    assert [(r["rank"], r["recovered"]) for r in records(job.logs, "straggler")] == [(1, False)]


@needs_py_spy
@pytest.mark.parametrize("mpi", OMPI5)
def test_mpi4py_balanced_job_names_no_one(tmp_path, jobs, mpi):
    job = Job(tmp_path, MPI4PY, slow=-1, name="balanced", np=2, mpi=mpi, interval=INTERVAL)
    jobs.append(job)
    t0 = job.training_since()

    def judged():
        return [r for r in records(job.logs, "wait_share") if r["t"] > t0 and None not in r["shares"]]
    wait_for(lambda: len(judged()) >= ROUNDS or job.proc.poll() is not None, timeout=30 * INTERVAL)
    rc, err = _stop(job)
    assert rc == 0, err
    assert len(judged()) >= ROUNDS, err
    assert records(job.logs, "straggler") == [] and "holding the job back" not in err, err
    assert "straggler(s) seen" not in err
