"""The attempt's processes on this host that outlived its starter, found and ended.

PR_SET_PDEATHSIG ends an adapter when its starter (or the starter's daemon) dies, but only
once the adapter has set it: an adapter whose starter exited while it was being started (a
stop in the first fraction of a second: Open MPI 5's prterun, told to end while it was still
starting the ranks, exited without them) was already re-parented when it looked at its
parent, took the new one for its own, and ran its worker as an orphan. Nothing else knew of it.

Every process the starter started carries the attempt's control-channel key in the
environment it was started with (the starter's environment, which its daemons and the
adapters inherit; ``/proc/PID/environ`` shows that first environment even after the adapter
took the key out of its own ``os.environ``). The key is random per attempt, so a process that
holds it is one of this attempt's and of nothing else. Once the starter has ended, any such
process still here is left over: it gets SIGTERM (an adapter's own teardown ends its worker
and what that started), then SIGKILL after ``GRACE`` s; the look is repeated until none is left,
since a daemon being ended may have forked one more.

Local to this host (and to the network-namespace hosts of the tests, which share its /proc):
a remote host's daemon ends its ranks itself when its connection to the starter closes.
"""
from __future__ import annotations

import os
import signal
import time
from typing import List, Tuple

from mpilaunch import procstat
from mpilaunch.contract import ADAPTER_TEARDOWN
from mpilaunch.rank.descendants import send

# s between the SIGTERM and the SIGKILL: a leftover adapter is not killed before its own
# teardown has ended its workers
GRACE = ADAPTER_TEARDOWN
GIVE_UP = 5.0     # s after the SIGKILL: a process the kernel cannot end (stuck in I/O) is named
POLL = 0.05


def marked(name: str, value: str) -> List[int]:
    """PIDs of this user's processes started with ``name=value`` in their environment (not
    this process)."""
    needle = f"{name}={value}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
        except OSError:     # gone, or another user's
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def end(name: str, value: str, grace: float = GRACE) -> Tuple[List[int], List[int]]:
    """End every process marked ``name=value``: (the PIDs found, those still running when it
    gave up). ([], []): nothing was left."""
    seen: List[int] = []
    start = time.monotonic()
    while True:
        left = [p for p in marked(name, value) if procstat.running(p)]
        if not left:
            return seen, []
        fresh = [p for p in left if p not in seen]
        seen += fresh
        send(fresh, signal.SIGTERM)
        waited = time.monotonic() - start
        if waited >= grace:
            send(left, signal.SIGKILL)
        if waited >= grace + GIVE_UP:
            return seen, left
        time.sleep(POLL)
