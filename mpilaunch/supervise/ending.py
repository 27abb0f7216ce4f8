"""The one door of an attempt's ending. Several threads may decide that an attempt ends: the
stderr relay (a rank's own failure), the control thread (an adapter died), the stop-signal
handler, timers (the graceful stop's end), a backend's watcher (Hydra's proxy watch:
``starter.Job.host_lost``) and a long job's stall watchdog. Each decision (the first failure
taken, the starter asked to end, the escalation to SIGKILL) is a transition of the attempt's
state (``stopping.StopState``: its table says which thread moves what) made under one lock,
``StopState.lock``, which ``starter.Job`` holds too: the starter gets exactly one SIGTERM (a
second makes Open MPI 4.1's mpirun exit and orphan its ranks, supervise/starter.py).

Why the stop-signal handler never takes that lock: Python runs a handler in the main thread,
between two bytecodes of whatever the main thread was doing. Were that inside the lock (the
main thread hands over the running job, :meth:`Ending.attach`), a ``threading.Lock`` would
deadlock there, and an ``RLock`` would let the handler in halfway through a decision (a check
done, its flag not yet set: two SIGTERMs). So the handler only counts the signal
(``StopState.signal_came``, written by the handler alone) and puts it on a
``queue.SimpleQueue``, whose ``put`` is reentrant (made for signal handlers); the stopper
thread takes it from there and acts under the lock. The lock is an ``RLock`` for another
reason: an action taken under it (a backend's ``on_rank_failure``) calls ``Job.end``, which
takes it again in the same thread."""
from __future__ import annotations

from _queue import SimpleQueue   # queue's own, without its imports (heapq, threading's)
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional

from mpilaunch.output import events
from mpilaunch.output.summary import Collector, Event
from mpilaunch.supervise.stopping import StopState

if TYPE_CHECKING:
    import subprocess
    from typing import Protocol

    class _Running(Protocol):   # the running starter (supervise/starter.py's Job)
        proc: subprocess.Popen

        @property
        def ended(self) -> bool: ...

        def end(self, escalate: float = ...) -> None: ...

        def kill(self, sig: int) -> None: ...


class Ending:
    """One attempt's: ``start()`` before the stop signals are taken (:meth:`on_signal` is the
    handler), ``attach(job, plan)`` once the starter runs, ``close()`` when it has ended and
    the handler is gone. ``rank_failed`` (relay), ``adapter_died`` (control thread) and
    ``act`` (timers) may come from any thread at any time."""

    def __init__(self, backend: Any, attempt: Any) -> None:
        self.backend, self.attempt = backend, attempt
        self.stop = StopState()
        self.job: Optional[_Running] = None   # once the starter runs
        self.plan: Any = None
        self.collector: Optional[Collector] = None  # the attempt's, once it has one (a dead adapter's)
        self.signals: "SimpleQueue[Optional[tuple]]" = SimpleQueue()
        self.thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """The stopper thread (started after ``usersignals.Forwarder.install``: it blocks
        SIGTSTP as every thread of the attempt must)."""
        self.thread = threading.Thread(target=self.stopper, name="stopper", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Every stop signal taken so far acted on; no decision is made after this."""
        if self.thread is not None:
            self.signals.put(None)
            self.thread.join(10)

    # -- the stop signals
    def on_signal(self, signum: int, _frame: object) -> None:
        """The stop-signal handler: counts and queues, nothing else (the module's text). The
        event record's line is written here, so that its teardown reason is the signal's:
        ``events.emit`` takes no lock (one ``os.write``)."""
        events.stop_signal(signum)
        self.signals.put((signum, self.stop.signal_came(signum)))

    def stopper(self) -> None:
        while True:
            item = self.signals.get()
            if item is None:
                return
            signum, number = item
            with self.stop.lock:
                job = self.job
                if job is None or number <= self.stop.handled or job.proc.poll() is not None:
                    continue    # before the starter ran: attach acts on it; or already acted on
                self.stop.handled = number
                self._act(signum)

    def attach(self, job: _Running, plan: Any) -> None:
        """The starter runs: a stop signal that came while it was being started, or an adapter
        that died before, is acted on now (each once: ``StopState.handled``). Nothing of the
        ending was acted on before: every action needs the job, and the job is handed over
        here, under the lock."""
        with self.stop.lock:
            self.job, self.plan = job, plan
            stop = self.stop
            number = stop.signals       # read once: a later signal is the stopper's
            if stop.first is not None:
                stop.handled = number
                self._act(stop.first)
            elif stop.failed:   # an adapter died before the job existed (adapter_died)
                self.backend.on_rank_failure(plan, job)

    def act(self, signum: int) -> None:
        """Stop the running job (a timer's call: the graceful stop's time is up)."""
        with self.stop.lock:
            self._act(signum)

    def _act(self, signum: int) -> None:
        """The first stop, a repeated one, a forced one (under the lock)."""
        stop, job = self.stop, self.job
        if job is None:   # every caller has the running job (stopper, attach, the grace's timer)
            return
        if not self.attempt.graceful and self.attempt.on_stop(job, signum, self.act):
            return    # --term-grace: the workers save first (on_stop made the attempt graceful)
        if not stop.ending:
            print(f"mpilaunch: {signal.Signals(signum).name} received, stopping the job",
                  file=sys.stderr, flush=True)
            job.end()   # RUNNING -> ENDING, once: a second SIGTERM orphans Open MPI 4.1's ranks
        elif stop.signals >= 3:
            print(f"mpilaunch: stopping now (SIGKILL to {self.backend.program})", file=sys.stderr,
                  flush=True)
            stop.force()
            job.kill(signal.SIGKILL)
        else:
            print("mpilaunch: already stopping; signal again to force", file=sys.stderr, flush=True)

    # -- the failures
    def rank_failed(self, event: Event) -> None:
        """From a relay: a rank's own failure (a status line); the first one ends the job."""
        if event.cause == "self" and (event.code or event.signal):
            with self.stop.lock:
                if self.stop.take_failure():
                    self.backend.on_rank_failure(self.plan, self.job)

    def adapter_died(self, rank: int, pid: Optional[int], host: str) -> None:
        """From the control thread: rank ``rank``'s adapter died (no last word) before the job
        was ending: its failure, as a rank's own (docs/HANGS.md)."""
        with self.stop.lock:
            job, stop = self.job, self.stop
            if stop.asked or (job is not None and job.ended) or not stop.take_failure():
                return      # the teardown's victim, or one more after the first failure
            if self.collector is not None:
                self.collector.adapter_died(rank, pid, host)
            events.emit(events.Kind.ADAPTER_DEAD, rank=rank, pid=pid, host=host)
            print(f"mpilaunch: rank {rank}'s adapter (pid {pid} on host {host}) died: its "
                  "connection to the launcher closed without its last word; stopping the job",
                  file=sys.stderr, flush=True)
            if job is not None:
                self.backend.on_rank_failure(self.plan, job)
            # else: ``attach`` hands the failure taken to the backend once the job exists
