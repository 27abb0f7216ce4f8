"""Did an attempt make progress? ``--max_no_progress_restarts N``: after N attempts in a row
that failed before any worker made progress, the job is not restarted again (a script that
fails at import, a missing file, a bad argument fail the same way every time; the rest of the
budget would only be spent relaunching it).

Any output is not progress: a script failing at import prints its traceback, and the adapter
reports that as the worker's first output. The rule (:func:`made_progress`), from what the
adapters tell the launcher of every rank (their status lines; rank/firstout.py marks the first
output, rank/watchdog.py's heartbeat):

* a worker that exited 0 (its part of the job is done), or
* a worker that showed output and did not fail itself in that attempt (it was still running,
  or ended by the teardown, or lost with its host, when the attempt ended), or
* a worker whose first output came at least :data:`LEAD` seconds before its own failure
  (it went on after writing: not just its dying words; both times are its host's clock), or
* a stall-watchdog ``progress`` event (``--stall-timeout``: output or a heartbeat after a
  silence).

A worker that prints nothing and fails (all its output buffered until the exit, or none) never
shows progress: a 1-rank job whose prints reach the log only at its exit, failing late every
time, is counted as making none (flush, ``PYTHONUNBUFFERED=1`` or logging to stderr fix that;
``--max_no_progress_restarts 0`` turns the limit off).
"""
from __future__ import annotations

from typing import Dict, Iterable, Mapping, Optional

LEAD = 5.0   # s between a worker's first output and its failure: more than a traceback's burst


class RankFacts:
    """What the launcher learnt about the workers of one attempt, rank by rank."""

    def __init__(self):
        self.first_output: Dict[int, float] = {}   # rank -> its worker's first output (host time)
        self.failed: Dict[int, float] = {}         # rank -> its worker's own failure (host time)
        self.done = set()                          # ranks whose worker exited 0
        self.heartbeat = set()                     # ranks with a watchdog progress event

    def feed(self, event) -> None:
        """A status line (``summary.Event``) of this attempt."""
        if event.rank is None or event.role != "worker":
            return
        if event.event == "output" and event.cause == "life":
            self.first_output.setdefault(event.rank, event.t)
        elif event.event in ("exit", "done") and event.code == 0 and not event.signal:
            if event.cause in ("life", "stall", "self"):
                self.done.add(event.rank)
        elif event.event == "progress" and event.cause == "stall":
            self.heartbeat.add(event.rank)
        elif event.cause == "self" and (event.code or event.signal):
            self.failed.setdefault(event.rank, event.t)

    def made_progress(self) -> bool:
        return made_progress(self.first_output, self.failed, self.done, self.heartbeat)


def made_progress(first_output: Mapping[int, float], failed: Mapping[int, float],
                  done: Iterable[int] = (), heartbeat: Iterable[int] = (),
                  lead: float = LEAD) -> bool:
    """The rule of the module's text: ``first_output``/``failed``: rank -> when its worker first
    wrote output / failed on its own; ``done``: ranks whose worker exited 0; ``heartbeat``: ranks
    with a watchdog progress event."""
    if any(True for _ in done) or any(True for _ in heartbeat):
        return True
    for rank, t in first_output.items():
        end: Optional[float] = failed.get(rank)
        if end is None or end - t >= lead:
            return True
    return False


def streak(attempts) -> int:
    """How many attempts in a row, from the last, failed without progress (``progress`` False;
    an attempt that does not say counts as progress)."""
    n = 0
    for att in reversed(attempts):
        if att.status == 0 or getattr(att, "progress", True):
            break
        n += 1
    return n
