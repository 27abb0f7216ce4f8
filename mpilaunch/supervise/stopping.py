"""How an attempt comes to an end, and the launcher's stop signals.

SIGINT, SIGTERM and SIGHUP stop the job (as they stop mpirun); SIGUSR1, SIGUSR2, SIGTSTP and
SIGCONT are the workers' (supervise/usersignals.py). During an attempt the supervision
(``starter.run_attempt``) takes the stop signals; between two attempts :class:`BetweenAttempts`
does, so that no further attempt starts."""
from __future__ import annotations

import enum
import signal
import threading
import time
from typing import Any, Dict, Optional

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stop(enum.IntEnum):
    """How far the starter's ending has got: it only moves forward (``StopState.state``)."""

    RUNNING = 0     # nothing asked of the starter (a graceful stop may be under way: see below)
    ENDING = 1      # the starter got its one SIGTERM (``starter.Job.end``), SIGKILL later
    FORCED = 2      # the third stop signal: SIGKILL to the starter now


class StopState:
    """The state of a running attempt: what it knows of its own ending, and the one place its
    transitions are made. Written by the stop-signal handler, the stopper thread, the relays
    (a rank's failure), the control thread (a dead adapter), timers, a backend's watcher and
    the stall watchdog.

    ``state`` (a :class:`Stop`) and ``failed`` move only forward, by the methods below, under
    ``lock`` (the one door of the attempt's ending: supervise/ending.py):

    ==============  ====================  ==================================================
    transition      moves                 taken by (thread)
    ==============  ====================  ==================================================
    take_failure()  failed: False->True   a relay (a rank's own failure), the control thread
                                          (a dead adapter, before or after the starter runs)
    end()           RUNNING -> ENDING     anyone ending the starter (``starter.Job.end``):
                                          the stopper (a stop signal), a timer (the grace's
                                          end), the backend (a rank's failure), a backend's
                                          watcher (a lost host), the stall watchdog, a relay
                                          (an in-place restart's failure that ends the job)
    force()         ENDING -> FORCED      the stopper, at the third stop signal
    ==============  ====================  ==================================================

    The two facts of the stop signals are written by the stop-signal handler alone, which
    never takes ``lock`` (supervise/ending.py says why), and only read by the others:

    first        the first stop signal (None: none came); the attempt then ends stopped by it
    signals      how many came (the third forces)

    ``handled`` (the number of the last stop signal acted on: each is acted on once) is the
    stopper's bookkeeping, under ``lock``. Whether the attempt took the stop itself
    (``--term-grace``'s graceful stop: every worker saving while the starter still runs) is
    the attempt's own fact, ``supervise.attempt.Attempt.graceful``: it is not a phase of the
    starter's ending (it goes on into ENDING, and the summary reads it after the end). So are
    the verdicts of a long job's attempt (attempts/restart.py's ``stalled``, ``no_progress``,
    ``foreign``): why it asked for the end (``end()`` through ``Job.end``), read by
    ``outcome.decide`` once the starter is gone.
    """

    __slots__ = ("state", "failed", "first", "signals", "handled", "lock")

    def __init__(self) -> None:
        self.state = Stop.RUNNING
        self.failed = False
        self.first: Optional[int] = None
        self.signals = 0
        self.handled = 0
        self.lock = threading.RLock()

    # -- the stop-signal handler's (no lock)
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

    @property
    def ending(self) -> bool:
        """The starter was asked to end (``starter.Job.ended``)."""
        return self.state >= Stop.ENDING

    # -- the transitions (under the lock)
    def take_failure(self) -> bool:
        """True for the first failure only (the later ones are its teardown's victims)."""
        with self.lock:
            if self.failed:
                return False
            self.failed = True
            return True

    def end(self) -> bool:
        """True for the first ask to end the starter only (one SIGTERM: a second makes Open
        MPI 4.1's mpirun exit and orphan its ranks)."""
        with self.lock:
            if self.state >= Stop.ENDING:
                return False
            self.state = Stop.ENDING
            return True

    def force(self) -> None:
        """The third stop signal: the starter is killed now, whatever it was doing."""
        with self.lock:
            self.state = Stop.FORCED


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
