"""A straggler that no line of code makes: 3 namespace test hosts, one torch/gloo rank each, the
same CPU-bound step on every rank (no rank sleeps or does more), and host 3 slowed down once
every rank is at its steps: its CPU throttled through the cgroup v1 ``cpu`` controller
(tests/helpers/throttle.py) to a tenth of one CPU, its sshd and the job's processes already
running there (daemon, adapter, worker, py-spy) moved in. The launcher, in host 1 as worker-0 is
on a platform, names rank 2 on host 3 (docs/MONITOR.md, "The straggler rule"): a ``straggler``
event with its rank and host, its line and the end-of-job list; nothing of the job is left on
any host, and the throttle is undone whatever happens.

Measured (5 runs, other jobs keeping the load at 5-8 on these 2 cores): the others wait
0.88-0.95 of the time, the throttled rank 0.10-0.35, its score when named 0.55-0.78 (the job
6-16x as long), 10-14 s after the throttle. With half the work a step (~8 ms; 4 runs) its own
share was 0.31-0.48 and its score 0.40-0.62: the quota is spent by the collective's threads
too, and a rank frozen inside the collective looks like waiting. Throttled from the start
instead, the rank would import torch at a tenth of a CPU (~20 s); and a lighter throttle is
none on a busy machine: at 25% of a CPU, with other jobs keeping the load at 10, every rank got
about that much, and no rank stood out.

The job runs until the test has seen the event (a stop file), so a slow machine makes it
longer, never wrong."""
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import inhost
from helpers.mpis import ALL
from helpers.procs import wait_for
from helpers.straggler import needs_py_spy, records
from helpers.throttle import cgroup_path, cpu_throttled

pytestmark = [pytest.mark.multinode, needs_py_spy, pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")]

INTERVAL = 5        # s: ~29 stack samples a round (the rule judges 20 or more)
QUOTA = 10000       # us of CPU per 100 ms period on host 3: a tenth of one CPU
SLOW = 2            # host 3's rank (one rank per host, in the hostfile's order)

# The same step on every rank: ~16 ms of one core's matmuls, then an all_reduce of 256 values
# (the collective's own CPU, small next to the step's: on the throttled host it is spent from
# the same quota, and a rank frozen by the quota inside the collective would look like waiting);
# the stop flag is all-reduced too so every rank leaves at the same step.
TRAIN = r'''
import datetime, os, sys, time
import torch
import torch.distributed as dist

torch.set_num_threads(1)
out = sys.argv[1]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))
w = torch.rand(256, 256)


def forward(x):
    for _ in range(32):
        x = torch.tanh(x @ w / 256)
    return x


def train():
    step, x, stop = 0, torch.rand(256, 256), torch.zeros(1)
    while True:
        grad = forward(x).mean(0)
        dist.all_reduce(grad)
        step += 1
        if rank == 0 and step == 1:
            with open(os.path.join(out, "training"), "w") as f:
                f.write(repr(time.time()))
        stop[0] = float(os.path.exists(os.path.join(out, "stop")))
        dist.all_reduce(stop)
        if stop[0]:
            return


train()
dist.destroy_process_group()
'''


def _throttle_running(th, host):
    """Move the job's processes already running inside ``host`` into its throttled cgroup too
    (``cpu_throttled`` moved its sshd: what it starts from now on): a host that becomes slow
    mid-job. ``cpu_throttled``'s exit moves them all back."""
    with open(os.path.join(cgroup_path(th, host), "cgroup.procs"), "w") as f:
        for p in inhost.in_host(th, host):
            try:
                f.write(str(p.pid))
                f.flush()
            except ProcessLookupError:
                pass        # gone meanwhile


@pytest.mark.parametrize("mpi", [m for m in ALL if m.id == "ompi5"])
def test_cpu_throttled_host_is_named_straggler(testhosts, mpi, tmp_path):
    th = testhosts
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "job"
    out.mkdir()
    logs = str(out / "logs")
    slow = th.hosts[SLOW]
    proc = inhost.launch(th, mpi.mpirun, out, 3, ["--sample-interval", str(INTERVAL)],
                         [str(script), str(out)])
    try:
        # every rank at its steps (torch imported at full speed), then host 3 slows down
        assert wait_for(lambda: (out / "training").exists() or proc.poll() is not None,
                        240, 0.2), "the job did not start its steps"
        with cpu_throttled(th, SLOW, quota_us=QUOTA):
            _throttle_running(th, SLOW)
            since = time.time()
            named = wait_for(lambda: [r for r in records(logs, "straggler") if r["rank"] == SLOW]
                             or proc.poll() is not None, 20 * INTERVAL, 0.5)
    finally:
        (out / "stop").touch()
        rc, _, err = inhost.finish(proc, out, 120)
    assert not os.path.exists(cgroup_path(th, SLOW))
    assert rc == 0, err
    assert named and named is not True, f"no straggler named:\n{err}"
    first = named[0]
    assert (first["rank"], first["host"], first["recovered"]) == (SLOW, slow.hostname, False), first
    assert first["score"] >= 0.30, first
    # named after three rounds in a row (monitor/straggler.py's PERSIST); the round the
    # throttle began in may not count
    # start-up, the rounds to learn who waits, then PERSIST rounds in a row (monitor/board.py,
    # straggler.py); 31 s in a loaded 2-core CI run
    assert since <= first["t"] <= since + 8 * INTERVAL, (first["t"] - since, first)
    assert first["others_wait"] > first["wait_share"], first
    # its time goes to the step's own code, which it runs at a tenth of a core
    assert re.fullmatch(r"train\.py:\d+ in forward", first["hot_frame"] or ""), first
    line = re.search(rf"^mpilaunch: rank {SLOW} on host (\S+) is holding the job back: others "
                     r"wait (\d+)% of the time for it", err, re.M)
    assert line and line.group(1) == slow.hostname, err
    assert re.search(rf"^  rank {SLOW} on host {re.escape(slow.hostname)}: held the job back \d+ s",
                     err, re.M), err
    # no other rank named once host 3 was throttled (the machine's other load may have named
    # one for a round before: the hosts share its 2 cores)
    assert not [r for r in records(logs, "straggler")
                if r["rank"] != SLOW and not r["recovered"] and r["t"] >= since], err
    assert wait_for(lambda: th.leftovers() == {}, timeout=20) is True, th.leftovers()
