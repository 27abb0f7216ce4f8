"""How an attempt comes to an end, and the launcher's stop signals.

SIGINT, SIGTERM and SIGHUP stop the job (as they stop mpirun); SIGUSR1, SIGUSR2, SIGTSTP and
SIGCONT are the workers' (supervise/usersignals.py). During an attempt the supervision
(``starter.run_attempt``) takes the stop signals; between two attempts :class:`BetweenAttempts`
does, so that no further attempt starts."""
from __future__ import annotations

import signal
import threading
import time
from typing import Any, Dict, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class StopState:
    """What an attempt knows of its own ending, written by the stop-signal handler, the relays
    (a rank's failure) and the control thread (a dead adapter). Each way out is taken once:

    first        the first stop signal (None: none came); the attempt then ends stopped by it
    signals      how many came (the third forces: SIGKILL to the starter)
    (those two are written by the stop-signal handler alone, which never takes ``lock``:
    supervise/ending.py says why; everything below is read and written under ``lock``)
    forwarded    the starter was asked to end (once: a second SIGTERM makes Open MPI 4.1 exit
                 and orphan its ranks)
    rank_failed  the first failure of a rank (or its adapter) was handed to the backend
    dead_early   an adapter died before the starter's Job existed: handed over once it does
    handled      the number of the last stop signal acted on (each is acted on once)
    lock         the one door of the attempt's ending (supervise/ending.py): the first failure
                 taken, the starter asked to end (``starter.Job.end``), the escalation
    (Whether the attempt took the stop itself, ``--term-grace``'s graceful stop, is the
    attempt's own fact: ``supervise.attempt.Attempt.graceful``.)
    """

    __slots__ = ("first", "signals", "forwarded", "rank_failed", "dead_early", "handled", "lock")

    def __init__(self) -> None:
        self.first: Optional[int] = None
        self.signals = 0
        self.forwarded = self.rank_failed = self.dead_early = False
        self.handled = 0
        self.lock = threading.RLock()

    def signal_came(self, signum: int) -> int:
        """In the stop-signal handler: count it -> its number (1 for the first)."""
        self.signals += 1
        if self.first is None:
            self.first = signum
        return self.signals

    @property
    def asked(self) -> bool:
        """A stop signal came: the attempt ends stopped, whatever else happens."""
        return self.first is not None

    def take_failure(self) -> bool:
        """True for the first failure only (the later ones are its teardown's victims)."""
        with self.lock:
            if self.rank_failed:
                return False
            self.rank_failed = True
            return True


class BetweenAttempts:
    """A stop signal between two attempts: no further attempt starts."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.previous: Dict[int, Any] = {s: signal.signal(s, self._on) for s in STOP_SIGNALS}

    def _on(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.signum and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    def restore(self) -> None:
        for s, h in self.previous.items():
            signal.signal(s, h)
