"""Long jobs, launcher side: an attempt with the launcher's part of job-wide restarts, the
graceful stop and the stall watchdog's verdict (each attempt's configuration: nextattempt.py).

**Where the restart happens.** By default (``--restart-mode in-place``, wherever the adapters
can: config/resilience.py ``restart_mode``) a worker's or scheduler's failure is restarted by
the adapters inside the running job (rank/inplace/: rank 0's adapter coordinates, every rank's
children restart on a fresh port, the next worker pre-started): mpirun, its daemons and the
adapters stay, as torchrun's agent does. Every rank's worker and rank 0's scheduler restart,
never one worker alone: MindSpore refuses a node id registering again with a live scheduler.
What ends the starter instead (a lost host, a dead adapter or daemon, the coordinator out of
reach) comes back here and is relaunched (and shrunk: shrink.py), the reason in the attempt's
record (:func:`fallback_reason`), the ``restart`` event and the attempts' summary. With
``--restart-mode relaunch`` (and by default under ``--exec`` or for an MPI program) every
failure tears the whole job down (Open MPI + adapters, ~0.5-2 s) and the launcher starts a
new mpirun, up to ``--max_restarts`` times for the whole job: every attempt gets fresh
processes all the way down, which also resets whatever a failed worker left behind in its
adapter's host.

* Every attempt's logs go to ``LOG_DIR/attempt<k>/`` (when ``--max_restarts`` > 0), so
  nothing is overwritten; the summary lists each attempt's root cause; the exit status is the
  last attempt's.
* Ports: an attempt after the first gets a fresh free port when the user gave none (rank 0
  here: picked and bound-tested by the launcher; elsewhere ``--master-port 0``: rank 0 picks);
  a new MindSpore scheduler then never meets a node id registered with the old one. A port
  the user gave is kept, and the launcher waits (up to ``PORT_WAIT`` s) until it is free.
* No restart after: success, a stop asked of the launcher (SIGINT/SIGTERM/SIGHUP), or a
  rank-side usage error (exit 2, e.g. the span check): those would fail the same way again.
* Every rank sees ``MPILAUNCH_RESTART_COUNT`` / ``TORCHELASTIC_RESTART_COUNT`` (and
  ``..._MAX_RESTARTS``).
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from types import MappingProxyType
from typing import Any, Callable, Dict, List, Optional

from mpilaunch.config.resilience import Resilience
from mpilaunch.contract import GRACE_EVENT, LIFE_CAUSE, RESTART_EVENT
from mpilaunch.attempts import nextattempt
from mpilaunch.attempts.nextattempt import State
from mpilaunch.attempts.phases import RestartPhases, with_note
from mpilaunch.attempts.progress import RankFacts
from mpilaunch.supervise.attempt import LINGER, Attempt, AttemptRecord, grace_lines
from mpilaunch.output import events, outcome
from mpilaunch.output.outcome import Failure, event_status, process_failure
from mpilaunch.output.summary import DEAD_MESSAGE, Collector, Event, describe_status, how_it_ended

IN_PLACE_NOTE = "; restarted in place"   # the attempts' summary, after the cause


def fallback_reason(lr: Resilience, index: int, status: int, stopped: object, lost: List[str],
                    dead: List[Event]) -> str:
    """Why attempt ``index`` of the in-place mode ended the starter instead of being restarted
    in place ('': it was not to be restarted at all: success, a stop, a usage error, the
    budget's last attempt, or the relaunch mode). ``lost``: the hosts the starter lost;
    ``dead``: the adapters that died (summary.Collector.dead, with how they ended)."""
    if not lr.in_place or status == 0 or stopped or index >= lr.max_restarts:
        return ""
    if lost:
        return f"host {', '.join(lost)} lost"
    if dead:
        d = dead[0]
        return (f"the adapter of rank {d.rank} on host {d.host} died"
                + (f" ({describe_status(d.code, d.signal)})" if d.code or d.signal else ""))
    return ("the job ended before its adapters restarted it in place (the starter or a daemon "
            "failed, or the adapters could not reach rank 0's)")


def relaunch_fields(last: AttemptRecord) -> Dict[str, Any]:
    """The ``restart`` event's fields for a relaunch after ``last``: its mode, and why the
    in-place mode fell back to it."""
    return {"mode": "relaunch", **({"fallback": last.fallback} if last.fallback else {})}


def relaunch_note(last: AttemptRecord) -> str:
    """The attempts' summary: how ``last`` was restarted when it was relaunched."""
    return f"; relaunched ({last.fallback})" if last.fallback else ""


# ---------------------------------------------------------------- one attempt

class _Collector(Collector):
    """Takes the watchdog's status lines (``cause: stall``) away from the failure events."""

    def __init__(self, attempt: "ResilientAttempt", backend: Any) -> None:
        super().__init__(backend)
        self.attempt = attempt

    def feed_status(self, event: Event) -> None:
        self.attempt.facts.feed(event)   # did any worker make progress (progress.py)
        if event.cause == LIFE_CAUSE and event.event == "up" and event.rank is not None:
            self.attempt.rank_hosts[event.rank] = event.host   # where each rank runs
        if event.cause == LIFE_CAUSE:   # an in-place restart's phases (phases.py)
            self.attempt.phase_event(event)
        if event.event == RESTART_EVENT:    # an attempt restarted in place
            self.attempt.in_place_event(event)
        elif event.cause == "stall":
            self.attempt.stall_event(event)
        elif event.event == GRACE_EVENT:    # an adapter's graceful stop
            self.attempt.grace_event(event)
        else:
            super().feed_status(event)


class ResilientAttempt(Attempt):
    """One attempt with the launcher's part of the graceful stop and the stall watchdog
    (the protocol: ``supervise.attempt.Attempt``). Its ``index`` moves on with each restart
    in place (a relay's thread, under ``lock``); the loop reads it from :meth:`record`."""

    def __init__(self, index: int, lr: Resilience, np: int) -> None:
        super().__init__(index, lr.stop_grace)
        self.lr, self.np = lr, np
        self.job: Any = None
        self.board: Any = None      # the monitor's (attempts/monitoring.py), None when it is off
        self.started_at: Optional[float] = None
        self.silent: Dict[int, Event] = {}    # rank -> its last stall event
        self.done: set = set()              # ranks whose worker exited 0
        # the silent ranks' events when the job was ended for it; the odd rank out, from every
        # rank's stacks (docs/HANGS.md)
        self.stalled: Optional[Dict[int, Event]] = None
        self.stall_verdict: Optional[str] = None
        self.grace_stops: List[Event] = []   # adapters that made one (asked or not: see finish)
        self.foreign: Optional[int] = None  # a stop signal an adapter got, mpilaunch not asking
        self.lock = threading.Lock()
        self.in_place: List[AttemptRecord] = []   # the attempts before this one restarted in place
        self.rank_hosts: Dict[int, str] = {}      # rank -> the host name its adapter reported
        self.lost: List[str] = []   # the hosts the starter reported lost
        self.facts = RankFacts()    # the workers' progress in this attempt (progress.py)
        self.progress = True    # any worker made progress (decided in finish)
        self.signalled: List[int] = []   # ranks killed by a signal, or whose adapter died (finish)
        self.fallback = ""      # why it was not restarted in place (finish, fallback_reason)
        # the in-place failure that ended the job: --max_no_progress_restarts in a row
        self.no_progress: Optional[AttemptRecord] = None
        self.phases = RestartPhases(np)   # where each in-place restart's time went

    def linger(self) -> float:
        """Adapters saving after the starter ended wait for them up to the grace."""
        if self.graceful:
            return LINGER + (self.lr.stop_grace or 0.0)
        if self.lr.term_grace is not None and (self.grace_stops or self.foreign):
            return LINGER + self.lr.term_grace
        return LINGER

    def collector(self, backend: Any) -> Collector:
        self.collected = _Collector(self, backend)
        return self.collected

    def started(self, job: Any, board: Any = None) -> None:
        self.job, self.board, self.started_at = job, board, time.monotonic()

    # -- graceful stop
    def on_stop(self, job: Any, signum: int, forward: Callable[[int], None]) -> bool:
        """The first stop signal: the plain attempt's graceful stop, once the attempt runs."""
        if self.started_at is None:
            return False
        return super().on_stop(job, signum, forward)

    def grace_event(self, event: Event) -> None:
        """An adapter stopped its worker gracefully on a stop signal it got itself (SIGTERM
        to that rank from another process, Slurm's scancel to every process of the job).
        Not asked by us, and not the teardown of a failure: the job cannot finish without
        that rank, so every rank gets the same graceful stop (an adapter already stopping
        ignores it) and the job ends with 128 + that signal (see finish)."""
        with self.lock:
            self.grace_stops.append(event)
            first = len(self.grace_stops) == 1 and not self.graceful
        job = self.job
        if not first or job is None or job.ended or self.collected.root_cause() is not None:
            return
        self.foreign = event.signal or signal.SIGTERM
        name = signal.Signals(self.foreign).name
        print(f"mpilaunch: rank {event.rank} stopped its worker on a {name} mpilaunch did not "
              "send: the same graceful stop for every rank", file=sys.stderr, flush=True)
        if job.control is not None:
            job.control.stop(self.lr.term_grace)

    # -- in-place restarts
    def in_place_event(self, event: Event) -> None:
        """Rank 0's adapter restarted attempt ``index`` in place (rank/inplace/): it is
        recorded like a relaunched attempt (its status and root cause), and this one becomes
        the next."""
        timed = None
        with self.lock:
            if self.no_progress is not None:
                return          # the job is ending
            self.facts.failure()
            failed = process_failure(event)
            done = AttemptRecord(self.index, event_status(event), failed.cause,
                                 progress=self.facts.made_progress(), note=IN_PLACE_NOTE,
                                 failures=(failed,))
            if nextattempt.judge(self.in_place + [done], self.lr) is State.NO_PROGRESS:
                # the restart decision's one owner, as for a relaunch: --max_no_progress_restarts
                # holds in place too, and the job ends with this failure (the adapters restart in
                # place only after a failure and within --max_restarts: no other way out here)
                self.no_progress = done
            else:
                self.in_place.append(done)
                self.index += 1
                self.silent, self.done = {}, set()
                self.facts = RankFacts()
                timed = self.phases.failure(self.index, event.t)
        if self.no_progress is None and timed is not None:
            self._timed(timed)
        if self.no_progress is not None:
            if self.job is not None:
                self.job.end()   # the attempt the adapters have just started
            return
        events.emit(events.Kind.RESTART, next_attempt=self.index, cause=done.cause, delay=0.0,
                    mode="in-place")
        self._moved_on()
        print(f"mpilaunch: attempt {done.index} failed ({done.cause}); restarted in place: "
              f"attempt {self.index} of at most {self.lr.max_restarts + 1}", file=sys.stderr,
              flush=True)

    def _moved_on(self) -> None:
        """Attempt ``index`` runs from here on, in the same starter. This attempt owns the
        number: the event record's lines and the monitor's board (``mpilaunch top``, /metrics)
        are told here, as the starter tells them at a relaunch."""
        events.next_attempt_in_place(self.index)
        if self.board is not None and self.job is not None:
            self.board.attempt_started(self.index, self.np, self.collected, self.job.control)

    def phase_event(self, event: Event) -> None:
        with self.lock:
            timed = self.phases.feed(event)
        if timed is not None:
            self._timed(timed)

    def _timed(self, timed: Dict[str, Any]) -> None:
        """An in-place restart's phases are known: in its attempt line and the record."""
        with self.lock:
            self.in_place = with_note(self.in_place, timed, self.np)
        # the attempt it started (its lines may come before the record moves on to it)
        events.emit(events.Kind.RESTART_PHASES, attempt=timed["attempt"],
                    from_attempt=timed["attempt"] - 1,
                    total=timed["total"], phases=timed["phases"], spare=timed["spare"])

    # -- stall watchdog
    def stall_event(self, event: Event) -> None:
        if event.rank is None:   # the watchdog's lines name their rank; one without names no one
            return
        with self.lock:
            if event.event == "stall":
                self.silent[event.rank] = event
            elif event.event == "progress":
                self.silent.pop(event.rank, None)
            elif event.event == "done":
                self.done.add(event.rank)
            fire = (self.stalled is None and self.silent
                    and len(set(self.silent) | self.done) >= self.np)
            if fire:
                self.stalled = dict(self.silent)
        if fire and self.job is not None:
            print(f"mpilaunch: no worker has shown progress for {self.lr.stall_timeout:g} s: "
                  "ending the job", file=sys.stderr, flush=True)

            from mpilaunch.stacks.server import stall_verdict   # only a stalled job loads it

            self.stall_verdict = stall_verdict(self.job, self.lr.log_dir)
            self.job.end()

    # -- the outcome
    def verdict(self) -> dict:
        return dict(stalled=self.stalled is not None,
                    foreign_grace=None if self.graceful else self.foreign,
                    ended_at=None if self.no_progress is None else self.no_progress.status)

    def finish(self, status: int, collector: Collector, stopped_by: Optional[int]) -> None:
        super().finish(status, collector, stopped_by)
        with self.lock:
            unfinished = self.phases.unfinished()
        for timed in unfinished:
            self._timed(timed)
        self.lost = collector.lost_hosts()
        for dead in collector.dead:   # an adapter's death, by the launcher's clock
            if self.facts.first_failure is None or dead.t < self.facts.first_failure:
                self.facts.first_failure = dead.t
        # a stop asked of mpilaunch is no failure of the script's: it never counts
        self.progress = status == 0 or stopped_by is not None or self.facts.made_progress()
        # the ranks whose process was killed by a signal or whose adapter died: their hosts
        # are checked before the next attempt (health.py)
        self.signalled = sorted({e.rank for e in collector.events + collector.dead
                                 + collector.notices if e.rank is not None and e.cause == "self"
                                 and (e.signal or e.message == DEAD_MESSAGE)})
        self.fallback = fallback_reason(self.lr, self.index, status, stopped_by or self.usage_error,
                                        self.lost, [how_it_ended(d, collector.notices)
                                                    for d in collector.dead])
        if stopped_by is not None:
            return
        if self.no_progress is not None:    # the job is the failure that ended it (its status:
            self.failures = self.no_progress.failures   # outcome.decide's, from verdict())
            self.progress, self.fallback = False, ""
        elif self.stalled is not None:
            self._first(Failure(outcome.STALLED, "stalled: no progress from ranks "
                                + ", ".join(str(r) for r in sorted(self.stalled))))
            self.fallback = self.fallback and "the stall watchdog ended the job"
        elif self.foreign and not self.graceful and status == 128 + self.foreign:
            # a stop signal to the ranks from something else: the adapters saved and exited
            # 0, but the job did not finish; the status it has without --term-grace
            self._first(Failure(outcome.STOPPED, f"stopped by a {signal.Signals(self.foreign).name}"
                                " mpilaunch did not send", signal=self.foreign))

    def _first(self, root: Failure) -> None:
        """``root`` is the attempt's root cause (a verdict of the attempt's own, not a
        process's): first, before the processes that failed on their own."""
        self.failures = (root,) + tuple(f for f in self.failures if f.kind == outcome.PROCESS)

    def summary(self, text: str, collector: Collector) -> str:
        if self.no_progress is not None and self.stopped_by is None:
            return (f"mpilaunch: job failed (exit status {self.status})\n"
                    f"  root cause: {self.cause}\n")
        if self.stalled is not None and self.stopped_by is None:
            lines = [f"mpilaunch: job failed (exit status {self.status})",
                     f"  root cause: stalled: no worker showed progress (output to its log, or "
                     f"$MPILAUNCH_HEARTBEAT_FILE touched) for {self.lr.stall_timeout:g} s"]
            for rank in sorted(self.stalled):
                ev = self.stalled[rank]
                lines.append(f"  stalled: rank {rank} on host {ev.host}: {ev.message}")
            if self.stall_verdict:
                lines.append(f"  verdict: {self.stall_verdict}")
            return "\n".join(lines) + "\n"
        sig = self.foreign
        foreign = bool(sig) and not self.graceful and self.status == 128 + (sig or 0)
        if foreign and sig:
            ranks = ", ".join(str(e.rank) for e in sorted(self.grace_stops, key=lambda e: e.rank or 0))
            text = (f"mpilaunch: job failed (exit status {self.status})\n"
                    f"  root cause: {signal.Signals(sig).name} reached the ranks, but "
                    "mpilaunch did not send it (a process, or the scheduler, sent it to the "
                    f"ranks); with --term-grace their workers saved first: ranks {ranks} "
                    "stopped gracefully\n")
        if self.graceful or foreign:
            text += grace_lines(collector, (self.lr.stop_grace if self.graceful
                                            else self.lr.term_grace) or 0.0)
        return text


    def record(self) -> AttemptRecord:
        """Taken under the lock: a relay still running cannot change it halfway."""
        with self.lock:
            return super().record()._replace(
                index=self.index, progress=self.progress, in_place=tuple(self.in_place),
                lost=tuple(self.lost), signalled=tuple(self.signalled), fallback=self.fallback,
                rank_hosts=MappingProxyType(dict(self.rank_hosts)))


