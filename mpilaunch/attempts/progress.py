"""Did an attempt make progress? ``--max_no_progress_restarts N``: after N attempts in a row
that failed before any worker made progress, the job is not restarted again (a script that
fails at import, a missing file, a bad argument fail the same way every time; the rest of the
budget would only be spent relaunching it).

Any output is not progress: a script failing at import prints its traceback, and the adapter
reports that as the worker's first output. The rule (:func:`made_progress`), from what the
adapters tell the launcher of every rank (their status lines; rank/firstout.py marks a
worker's first output, rank/watchdog.py its heartbeat), timed by the launcher's clock as the
lines arrive (one clock for every host):

* a worker that exited 0 (its part of the job is done), or
* a worker whose first output came at least :data:`LEAD` seconds before the attempt's first
  failure (any process failing on its own; without one, the attempt's end): it went on
  after writing, so its output was not just dying words, or
* a stall-watchdog ``progress`` event (``--stall-timeout``: output or a heartbeat after a
  silence).

Why not "a worker that showed output and did not fail itself": in a job that fails at import
on every rank, the teardown often kills a rank just after it wrote its traceback and before
its own exit was reported (measured: one run in six with 2 ranks), and that rank would count as
progress. A worker whose output is all buffered until its exit shows none: a job whose
prints reach the log only at its exit counts as making no progress (flush,
``PYTHONUNBUFFERED=1`` or logging to stderr fix that; ``--max_no_progress_restarts 0`` turns
the limit off).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Mapping, Optional, Sequence, Set

if TYPE_CHECKING:
    from mpilaunch.output.summary import Event

LEAD = 5.0   # s between a worker's first output and the first failure: more than a traceback's


class RankFacts:
    """What the launcher learnt about the workers of one attempt; ``clock``: the launcher's
    (the arrival of each status line)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.first_output: Dict[int, float] = {}   # rank -> its worker's first output
        self.first_failure: Optional[float] = None  # any process's own failure, the first
        self.ended: Optional[float] = None         # the attempt's end (finish)
        self.done: Set[int] = set()                # ranks whose worker exited 0
        self.heartbeat: Set[int] = set()           # ranks with a watchdog progress event

    def feed(self, event: "Event") -> None:
        """A status line (``summary.Event``) of this attempt, as it arrives."""
        if event.cause == "self" and (event.code or event.signal):
            if self.first_failure is None:
                self.first_failure = self.clock()
            return
        if event.rank is None or event.role != "worker":
            return
        if event.event == "output" and event.cause == "life":
            self.first_output.setdefault(event.rank, self.clock())
        elif event.event in ("exit", "done") and event.code == 0 and not event.signal:
            self.done.add(event.rank)
        elif event.event == "progress" and event.cause == "stall":
            self.heartbeat.add(event.rank)

    def failure(self) -> None:
        """A failure the status lines do not carry (an in-place restart's, a lost host's)."""
        if self.first_failure is None:
            self.first_failure = self.clock()

    def made_progress(self) -> bool:
        end = self.first_failure
        if end is None:
            end = self.ended if self.ended is not None else self.clock()
        return made_progress(self.first_output, end, self.done, self.heartbeat)


def made_progress(first_output: Mapping[int, float], end: float, done: Iterable[int] = (),
                  heartbeat: Iterable[int] = (), lead: float = LEAD) -> bool:
    """The rule of the module's text: ``first_output``: rank -> when its worker first wrote
    output; ``end``: the attempt's first failure (or its end); ``done``: ranks whose worker
    exited 0; ``heartbeat``: ranks with a watchdog progress event."""
    if any(True for _ in done) or any(True for _ in heartbeat):
        return True
    return any(end - t >= lead for t in first_output.values())


def streak(attempts: Sequence[Any]) -> int:
    """How many attempts in a row, from the last, failed without progress (``progress`` False;
    an attempt that does not say counts as progress)."""
    n = 0
    for att in reversed(attempts):
        if att.status == 0 or att.progress:
            break
        n += 1
    return n


def spent(attempts: Sequence[Any], limit: int) -> bool:
    """The rule of ``--max_no_progress_restarts limit`` (0: no limit): the last ``limit``
    attempts all failed without progress, so the job is not restarted again. The one check,
    for a relaunch (loop.judge) and a restart in place (restart.ResilientAttempt) alike."""
    return bool(limit) and streak(attempts) >= limit
