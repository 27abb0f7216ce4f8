"""The workers' signals, launcher side: SIGUSR1, SIGUSR2, SIGTSTP and SIGCONT sent to mpilaunch
go once to every rank, as a bare starter's would (docs/ARCHITECTURE.md, "Signals").

* Through the starter where it forwards that signal to every rank (``Backend.forwards``,
  measured per starter: docs/OPENMPI_FACTS.md section 16), else over the control channel
  (``control.py``; the adapters signal their descendants). Neither is there under ``--exec``
  for a signal the starter does not forward: the launcher says so.
* The launcher itself neither dies nor stops of them: mpirun does not either (a Ctrl-Z stops
  the ranks, not mpirun), and a stopped launcher could not pass the SIGCONT on.
* A SIGTSTP from Slurm (``scontrol suspend``) is not passed on: Slurm stops every process of
  the job itself and continues them on ``scontrol resume``, which it may do before the
  forwarded copy arrives, leaving the workers stopped (measured under srun). Only the sender
  tells it apart, so SIGTSTP is taken by a thread with ``sigtimedwait`` (its sender's pid);
  the main thread and every thread started after it block it (``install`` comes before the
  attempt's first thread: a thread that does not block it would take it, and its handler
  would wait for the main thread, behind a later SIGCONT), and the starter is started with
  it unblocked again (``unblock_in_child``).
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from typing import Any, List, Optional

from mpilaunch.supervise.control import missing

SIGNALS = (signal.SIGUSR1, signal.SIGUSR2, signal.SIGTSTP, signal.SIGCONT)


def unblock_in_child() -> None:
    """In the starter, between fork and exec: the mask is inherited through exec."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTSTP,))


SLURM_WINDOW = 5.0      # s after Slurm's SIGTSTP or the SIGCONT of its resume (see deliver)


def _name_of(pid: Optional[int]) -> str:
    if pid is None:
        return "?"
    try:
        with open(f"/proc/{int(pid)}/comm") as f:
            return f.read().strip()
    except (OSError, TypeError, ValueError):
        return "?"


def _from_slurm(pid: Optional[int]) -> bool:
    return _name_of(pid) == "slurmstepd"


class Forwarder:
    """One attempt's: ``install()`` before the starter is started, ``started(job, np)`` once it
    runs, ``uninstall()`` when it has ended. ``delivered``: the signals given to the workers
    (the summary says where a signal that killed one came from)."""

    def __init__(self, backend: Any, control: Any = None) -> None:
        self.backend, self.control = backend, control
        self.job = None
        self.np = 0
        self.delivered: List[int] = []
        self.lock = threading.RLock()    # a handler may run while the main thread holds it
        self.slurm_mark = None  # monotonic time of Slurm's last SIGTSTP, or of a SIGCONT after it

    def install(self) -> None:
        global _current
        for sig in SIGNALS:
            signal.signal(sig, self._on_signal)     # also SIGTSTP: a thread that does not block it
        signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTSTP,))
        with _taker_lock:
            _current = self
            _start_taker()

    def started(self, job: Any, np: int) -> None:
        with self.lock:
            self.job, self.np = job, np

    def uninstall(self) -> None:
        global _current
        with self.lock:
            self.job = None
        with _taker_lock:
            if _current is self:
                _current = None
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGTSTP,))
        for sig in SIGNALS:     # until the next attempt's ranks run: no one to give it to
            signal.signal(sig, _no_ranks)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.deliver(signum, None)

    def deliver(self, signum: int, sender: Optional[int]) -> None:
        name = signal.Signals(signum).name
        with self.lock:
            job = self.job
            if job is None or job.proc.poll() is not None:
                _say(f"{name} received while no rank runs: not forwarded")
                return
            now = time.monotonic()
            if signum == signal.SIGTSTP and _from_slurm(sender):
                self.slurm_mark = now
                _say("SIGTSTP from Slurm (scontrol suspend): Slurm stops and resumes every "
                     "process of the job itself; not forwarded")
                return
            if signum == signal.SIGTSTP and self.slurm_mark is not None \
                    and now - self.slurm_mark < SLURM_WINDOW:
                # a second copy of the suspend's SIGTSTP, taken where the sender is not seen
                # (or relayed by a process of the job): passed on, it would stop the workers
                # again after Slurm's resume
                _say(f"SIGTSTP {now - self.slurm_mark:.1f} s after Slurm's suspend or resume: "
                     f"taken as Slurm's; not forwarded{_sent_by(sender)}")
                return
            if signum == signal.SIGCONT and self.slurm_mark is not None:
                self.slurm_mark = now
            self.delivered.append(signum)
            if signum in self.backend.forwards:
                job.kill(signum)
                how = f"forwarded to every rank by {self.backend.program}"
            elif self.control is not None:
                how = ("sent to every rank's adapter, for its workers"
                       + missing(self.control.signal(signum), self.np))
            else:
                how = (f"not delivered: {self.backend.program} does not forward it, and under "
                       "--exec no adapter is there to")
        _say(f"{name} received: {how}" + (_sent_by(sender) if signum == signal.SIGTSTP else ""))


# One thread per process takes SIGTSTP (sigwaitinfo, so its sender is known) and hands it to
# the attempt that runs. Started once, by the first install, never joined: an attempt's end must
# not wait for it (a thread per attempt, polling to notice its end, cost every launch up to
# 0.25 s at its end, measured 0.14 s on a 1-rank launch).
_taker = None
_current: Optional[Forwarder] = None
_taker_lock = threading.Lock()


def _start_taker() -> None:
    global _taker
    if _taker is None or not _taker.is_alive():
        _taker = threading.Thread(target=_take_tstp, name="sigtstp", daemon=True)
        _taker.start()


def _take_tstp() -> None:
    while True:
        info = signal.sigwaitinfo((signal.SIGTSTP,))
        with _taker_lock:
            fw = _current
        if fw is not None:      # else between attempts: no one to give it to (_no_ranks)
            fw.deliver(signal.SIGTSTP, info.si_pid)


def _sent_by(sender: Optional[int]) -> str:
    return f" (sent by pid {sender}, {_name_of(sender)})" if sender else ""


def _say(text: str) -> None:
    print(f"mpilaunch: {text}", file=sys.stderr, flush=True)


def _no_ranks(signum: int, _frame: object) -> None:
    """A workers' signal between two attempts (or after the job): no rank runs to get it."""
