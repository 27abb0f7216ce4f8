"""A rank's one way to run its children: :func:`supervise`.

One :class:`~mpilaunch.rank.supervisor.Supervisor` runs them; the opt-in features hook in:

* ``opts.resilience`` (the launcher's long-job flags): the graceful stop of ``--term-grace`` and
  the stall watchdog (rank/resilience.py, :class:`~mpilaunch.rank.resilience.Hooks`);
* ``opts.monitor`` (``--monitor-interval``): the samples of rank/monitor.py, sent over the
  control channel;
* ``restarts`` (``--in-place``): one supervisor per attempt, until an attempt is not restarted
  (rank/inplace/loop.py, :class:`~mpilaunch.rank.inplace.loop.Restarts`).

What comes from other threads (the launcher's stop command, the in-place coordinator's
restart) goes through one :class:`Inbox`: the running supervisor's queue, or a queue that waits
for the next one.
"""
from __future__ import annotations

import _queue as queue   # SimpleQueue and Empty, without queue.py and heapq
import threading

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Any, Callable, Optional, Sequence, Tuple

    from mpilaunch.rank.options import Options

    from mpilaunch.rank.plan import ChildSpec

from mpilaunch.rank.relay import pipe_size
from mpilaunch.rank.supervisor import Supervisor

# the events that outlive the supervisor they arrived for: a stop signal, and the in-place
# coordinator's word (rank/inplace/coordinate.py: the next attempt, or the end of the job)
LASTING = ("signal", "restart", "finish")


class Inbox:
    """Events from other threads: into the running supervisor's queue, else kept (``waiting``)
    for the next one, or for the wait between two attempts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sup: Optional[Supervisor] = None
        self.waiting: "queue.SimpleQueue" = queue.SimpleQueue()

    def put(self, ev: Tuple[Any, ...]) -> None:
        with self.lock:
            sup = self.sup
        (sup.events if sup is not None else self.waiting).put(ev)

    def attach(self, sup: Supervisor, attempt: Optional[int] = None) -> None:
        """``sup`` takes the events from now on, and those that waited for it (a restart to
        ``attempt`` or an earlier one is done)."""
        with self.lock:
            self.sup = sup
        move(self.waiting, sup.events, after=attempt)

    def detach(self) -> None:
        """The supervisor has ended: its events that still matter wait for the next one."""
        with self.lock:
            sup, self.sup = self.sup, None
        if sup is not None:
            move(sup.events, self.waiting)


def move(src: "queue.SimpleQueue", dst: "queue.SimpleQueue", after: Optional[int] = None) -> None:
    """Move the :data:`LASTING` events from ``src`` to ``dst``; ``after``: the attempt ``dst``
    runs (a restart to it, or to an earlier one, is dropped)."""
    while True:
        try:
            ev = src.get_nowait()
        except queue.Empty:
            return
        if ev[0] in LASTING and not (after is not None and ev[0] == "restart" and ev[1] <= after):
            dst.put(ev)


def supervise(specs: Sequence[ChildSpec], opts: Options, rank: int, host: str,
              local_size: int = 1, channel: Optional[Tuple[str, str]] = None,
              # rank/inplace/loop.py's Restarts (opt-in: not imported here, even for the checker)
              restarts: Optional[Callable[[Inbox, Options], Any]] = None) -> int:
    """Run this rank's children (``specs``) to their end; the exit status of the rank.
    ``channel``: the launcher's control channel (rank/control.py), if it opened one;
    ``restarts``: a factory ``(inbox, opts) -> Restarts`` for ``--in-place``."""
    inbox = Inbox()
    hooks = None
    if opts.resilience is not None or channel is not None:
        # the launcher's graceful stop comes over the channel with its grace, even without the
        # long-job flags (a stop signal to mpilaunch is a graceful stop by default)
        from mpilaunch.rank import resilience

        hooks = resilience.Hooks(opts.resilience or resilience.NO_FLAGS, inbox.put)
        stop = hooks.on_stop
    mon = None
    if channel is not None:
        from mpilaunch.rank import control     # only a launch with the channel pays for it

        link = control.listen(rank, channel, stop)
        if opts.monitor:    # samples go to the launcher over the channel: none without it
            from mpilaunch.rank import monitor

            mon = monitor.start(opts.monitor, rank, lambda: inbox.sup, link)
    again = restarts(inbox, opts) if restarts is not None else None
    grace, size, tell = opts.scheduler_grace, pipe_size(local_size), not opts.no_scheduler
    try:
        while True:
            sup = (Supervisor(specs, rank, host, scheduler_grace=grace, pipe_size=size,
                              tell_rank0=tell) if again is None
                   else again.supervisor(specs, rank, host, scheduler_grace=grace, pipe_size=size,
                                         tell_rank0=tell))
            inbox.attach(sup, None if again is None else again.k)
            if again is not None:
                again.started(sup)
            try:
                rc = sup.run() if hooks is None else hooks.run(
                    sup, opts if again is None else again.attempt_opts(), rank, host)
            finally:
                inbox.detach()
            if sup.stop_signal is not None:     # torn down by a stop signal
                if again is not None:
                    again.stopped(sup)
                return rc if hooks is None else hooks.stopped(sup, rank, host, rc)
            if again is None:
                return rc
            specs = again.next(sup, rc)
            if specs is None:
                return again.status
    finally:
        if mon is not None:
            mon.stop()
        if again is not None:
            again.close()
