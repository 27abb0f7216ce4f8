"""Two stragglers of eight named (docs/MONITOR.md, "The straggler rule"): 8 mpi4py ranks under
Open MPI 5 on this 2-core machine (``--oversubscribe``), an ``Allreduce`` per step, and ranks 2
and 5 sleeping 40 ms a step in ``read_shard`` (two slow disks). Both slow ranks reach the
collective last and hardly wait there, the six others wait for them: the median of the other
ranks' wait shares, the rule's yardstick, is still a waiter's when two of eight are slow, so
both are named, with their frame, in ``top --once``, in a ``straggler`` event each and in the
job's end lines. The start-up lets the few never seen waiting be judged after two rounds
(monitor/board.py), so two never-waiting ranks are judged as one is.

Eight ranks on two cores: Open MPI's waiting ranks spin, and mpirun given slots for all eight
(mpilaunch's hostfile) does not know the cores are oversubscribed, so they spin without
yielding: a step took 420 ms instead of the 43 ms the sleep sets, the Allreduce held every
rank, the slow ones' share read 0.8-1.0. ``mpi_yield_when_idle``, as Open MPI advises for
oversubscribed nodes, gives the slow ranks their core back: their shares 0.07-0.24 against
the others' 0.97-1.0 (one hand run under a load of 5-8). The step's own work is a single
16x16 product: with four ranks a core, a loaded machine once kept a slow rank runnable but off
its core inside four 64x64 products long enough that ``forward``, not ``read_shard``, was where
its time went."""
import re
import socket
import subprocess

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv
from helpers.mpis import ALL
from helpers.procs import alive, descendants, wait_for
from helpers.straggler import INTERVAL, Job, jobs, needs_py_spy, records  # noqa: F401 (jobs: a fixture)

from mpilaunch.monitor import board, straggler

OMPI5 = [m for m in ALL if m.id == "ompi5"]
SLOW = (2, 5)
HOST = socket.gethostname()

MPI4PY = r'''
import os, sys, time
import numpy as np
from mpi4py import MPI

out, slow = sys.argv[1], [int(r) for r in sys.argv[2].split(",")]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
w = np.random.default_rng(0).random((64, 64)) / 64


def read_shard(step):
    if rank in slow:
        time.sleep(0.04)
    return np.ones((64, 64))


def forward(x):
    return np.tanh(x[:16, :16] @ w[:16, :16])


def train():
    step, total = 0, np.zeros((16, 16))
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


def _named(logs):
    return {r["rank"] for r in records(logs, "straggler") if not r["recovered"]}


@needs_py_spy
@pytest.mark.parametrize("mpi", OMPI5)
def test_two_slow_ranks_of_eight_are_both_named(tmp_path, jobs, mpi, monkeypatch):
    monkeypatch.setenv("OMPI_MCA_mpi_yield_when_idle", "1")     # mpirun passes it to the ranks
    job = Job(tmp_path, MPI4PY, slow=",".join(map(str, SLOW)), name="eight", np=8, mpi=mpi,
              extra=("--oversubscribe",))
    jobs.append(job)
    job.training_since()
    both = wait_for(lambda: _named(job.logs) >= set(SLOW) or job.proc.poll() is not None,
                    timeout=30 * INTERVAL)
    top = subprocess.run(mpilaunch_argv("top", "--once", job.logs), env=clean_env(), cwd=REPO,
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL) \
        if job.proc.poll() is None else None
    kids = descendants(job.proc.pid)
    rc, err = job.stop()
    assert wait_for(lambda: not alive(kids), 20), alive(kids)
    assert rc == 0, err[-3000:]
    shares = [r["shares"] for r in records(job.logs, "wait_share")]
    assert both is True and _named(job.logs) >= set(SLOW), \
        f"named {_named(job.logs)}: {shares}\n{err[-3000:]}"
    named = records(job.logs, "straggler")
    # no one else, ever; each slow rank named with its own frame, the others waiting for it
    assert {r["rank"] for r in named} == set(SLOW), named
    for r in named:
        assert (r["host"], r["recovered"]) == (HOST, False), r
        assert r["score"] >= straggler.ON and r["others_wait"] > r["wait_share"], r
        assert re.fullmatch(r"train\.py:\d+ in read_shard", r["hot_frame"] or ""), r
    # both within the start-up's rounds and PERSIST in a row of the first sampled round
    sampled = records(job.logs, "wait_share")[0]["t"]
    bound = (board.LAST_ROUNDS + straggler.PERSIST + 1) * INTERVAL
    assert max(r["t"] for r in named) - sampled <= bound, (named, sampled)
    # top: its header names both; each one's row says so with its frame, no other row does
    assert top is not None and top.returncode == 0, top and top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].endswith(f"; straggler: rank 2 on {HOST}, rank 5 on {HOST}"), top.stdout
    rows = {int(line.split()[0]): line for line in lines[2:] if line.split()[:1] != []}
    assert sorted(rows) == list(range(8)), top.stdout
    for rank, row in rows.items():
        assert ("straggler" in row) == (rank in SLOW), top.stdout
    for rank in SLOW:
        assert re.search(r"\d+%\s+straggler\s+train\.py:\d+ in read_shard$", rows[rank]), top.stdout
        assert re.search(rf"^mpilaunch: rank {rank} on host {re.escape(HOST)} is holding the job back: "
                         r"others wait \d+% of the time for it; its time goes to train\.py:\d+ in "
                         r"read_shard$", err, re.M), err[-3000:]
    end = re.search(r"^mpilaunch: 2 straggler\(s\) seen\n((?:  .*\n?){2})", err, re.M)
    assert end, err[-3000:]
    listed = re.findall(r"^  rank (\d+) on host \S+: held the job back", end.group(1), re.M)
    assert sorted(map(int, listed)) == list(SLOW), end.group(1)
