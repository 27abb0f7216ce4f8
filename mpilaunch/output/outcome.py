"""The job's exit status, decided in one place, the same way for every backend.

In order (the first that applies):

1. a stop asked of mpilaunch (SIGINT, SIGTERM, SIGHUP): 128 + that signal, as a shell reports it;
2. the stall watchdog ended the job: 124 (as ``timeout(1)``);
3. with ``--term-grace``, the ranks got a stop signal mpilaunch did not send (SIGTERM to a
   rank, Slurm's scancel to every process), saved and exited 0: 128 + that signal, the status
   the job has without ``--term-grace``;
4. a host was lost: 255 (also when the starter itself said 0: Open MPI 5 sometimes does);
5. the starter ended non-zero and a rank failed on its own: that rank's status (its exit code,
   or 128 + N for signal N: also a user's SIGUSR1/SIGUSR2 that killed a worker without a
   handler for it, forwarded by mpilaunch or not; the summary says which). Each starter has its own idea of its status after a failure
   (Hydra's mpiexec 15 or 255 after our SIGTERM, srun the status of a rank it tore down, Open
   MPI the first rank it noticed): the root cause the summary names is the one reported;
6. otherwise the starter's own status (128 + N when a signal ended it).

A usage error an adapter found is its exit 2 (rule 5); a preflight failure (1) and a usage
error found by the launcher (2) never start anything and so never reach here.
"""
from __future__ import annotations

from typing import Optional

STALL_STATUS = 124
LOST_HOST_STATUS = 255


def event_status(event) -> int:
    """A status-line event's status: 128 + N for signal N, else its exit code."""
    return 128 + event.signal if event.signal else int(event.code or 0)


def decide(returncode: int, collector, stopped_by: Optional[int] = None, stalled: bool = False,
           foreign_grace: Optional[int] = None) -> int:
    """``returncode``: the starter's, as Popen gives it (negative: killed by that signal);
    ``foreign_grace``: the stop signal of rule 3, if any."""
    status = 128 - returncode if returncode < 0 else returncode
    if stopped_by is not None:
        return 128 + stopped_by
    if stalled:
        return STALL_STATUS
    if foreign_grace and status == 0:
        return 128 + foreign_grace
    if collector.lost_hosts():
        return LOST_HOST_STATUS
    if status != 0:
        root = collector.root_cause()
        if root is not None and (root.code or root.signal):   # a dead adapter's may be unknown
            return event_status(root)
    return status
