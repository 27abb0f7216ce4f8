"""The attempt protocol: what the supervision of one attempt (``starter.run_attempt``) asks of
the attempt it runs. ``Attempt`` is a plain launch; ``attempts.restart.ResilientAttempt`` fills the
hooks in for the graceful stop, the stall watchdog and restarts in place; the loop that starts
one attempt after another is ``attempts.loop.run_job``."""
import signal
import sys
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

from mpilaunch.contract import ADAPTER_TEARDOWN, GRACE_EVENT
from mpilaunch.output.outcome import Failure, failures
from mpilaunch.output.summary import Collector

# s the launcher waits for adapters still tearing down after the starter ended
LINGER = ADAPTER_TEARDOWN
GRACE_MARGIN = 5.0      # after the grace: the adapters' SIGKILL, reports and exit


class AttemptRecord(NamedTuple):
    """How one attempt ended: what the loop of attempts (``attempts.loop.run_job``) decides
    from and the attempts' summary lists. Made once the attempt has ended
    (:meth:`Attempt.record`); the loop amends it only by making a new one (``_replace``), so
    no thread still running can change it behind the loop's back. A NamedTuple, as the launch
    config is, not a dataclass: dataclasses (with inspect, ast, dis, tokenize) and the making of
    each class cost every launch before mpirun starts (docs/ARCHITECTURE.md, start-up).

    status, cause    the attempt's exit status and its root cause, in words (its first
                     failure's cause)
    failures         how it failed, typed (output/outcome.py's Failure): the root cause
                     first, then every other process that failed on its own; () on success
    stopped_by       the stop signal that ended it (to mpilaunch, during or after it), or None
    usage_error      an adapter refused to start (exit 2): it would fail the same way again
    progress         some worker made progress (attempts/progress.py)
    note             what the attempts' summary adds to its line (a shrink, host discovery)
    in_place         the attempts before it restarted in place inside the same launch
    lost             the hosts the starter reported lost
    signalled        the ranks killed by a signal, or whose adapter died
    rank_hosts       rank -> the host its adapter reported
    end_note         why the job ended after it, when its status alone does not say
    end_status       the job's status when that is not the attempt's (a host failed its check)
    fallback         why an attempt of the in-place mode was not restarted in place (a lost
                     host, a dead adapter): the relaunch that follows says it
    """

    index: int   # type: ignore[assignment]  # the attempt's number; tuple.index is not used on a record
    status: int
    cause: str = ""
    stopped_by: Optional[int] = None
    usage_error: bool = False
    progress: bool = True
    note: str = ""
    in_place: Tuple["AttemptRecord", ...] = ()
    lost: Tuple[str, ...] = ()
    signalled: Tuple[int, ...] = ()
    rank_hosts: Mapping[int, str] = MappingProxyType({})
    end_note: str = ""
    end_status: Optional[int] = None
    fallback: str = ""
    failures: Tuple[Failure, ...] = ()


class Attempt:
    """One attempt of the job. The defaults are a plain launch. In the order they are called:

    linger()                    -> s to wait for adapters still running after the starter
    collector(backend)          -> the Collector the starter's output goes into
    started(job, board)            the starter runs (``starter.Job``: kill, end, later; the
                                   monitor's board, or None: told when the attempt moves on)
    on_stop(job, signum, act)   -> True when the attempt handles this stop itself, and is
                                   ``graceful`` from then on (the fact's one owner;
                                   ``act(signum)``: the ordinary stop, for later)
    verdict()                   -> keyword arguments for ``outcome.decide`` (stalled, ...)
    finish(status, collector, stopped_by)    the attempt's status and cause, recorded
    summary(text, collector)    -> the failure summary, amended
    record()                    -> its AttemptRecord, once it has ended
    """

    def __init__(self, index: int = 0, stop_grace: Optional[float] = None) -> None:
        self.index = index
        self.status: Optional[int] = None
        self.stopped_by: Optional[int] = None
        self.failures: Tuple[Failure, ...] = ()   # set once, by finish (its causes: the record's)
        self.usage_error = False
        # the graceful stop of a stop signal to mpilaunch (config/resilience.py): the grace,
        # and whether this attempt asked for it
        self.stop_grace = stop_grace
        self.graceful = False

    @property
    def cause(self) -> str:
        """The root cause in words: the first failure's."""
        return self.failures[0].cause if self.failures else ""

    def linger(self) -> float:
        """Adapters saving after the starter ended are waited for up to the grace."""
        return LINGER + (self.stop_grace or 0.0 if self.graceful else 0.0)

    def collector(self, backend: Any) -> Collector:
        return Collector(backend) if self.stop_grace is None else _GraceCollector(backend)

    def started(self, job: Any, board: Any = None) -> None:
        pass

    def on_stop(self, job: Any, signum: int, act: Callable[[int], None]) -> bool:
        """The first stop signal to mpilaunch: ``stop`` over the control channel to every
        adapter (each SIGTERMs its worker's main process alone and SIGKILLs what is left after
        the grace: rank/resilience.py), then the ordinary stop (``act``) if the job has not
        ended by then. Without the channel, the starter's stop at once."""
        grace = self.stop_grace
        if grace is None or job is None or job.control is None:
            return False
        self.graceful = True
        from mpilaunch.supervise.control import missing

        note = missing(job.control.stop(grace), job.np)
        print(f"mpilaunch: {signal.Signals(signum).name} received: SIGTERM to every worker, "
              f"{grace:g} s to save (signal again to stop at once){note}", file=sys.stderr,
              flush=True)
        job.later(grace + GRACE_MARGIN, act, signum)
        return True

    def verdict(self) -> dict:
        return {}

    def finish(self, status: int, collector: Collector, stopped_by: Optional[int]) -> None:
        self.status, self.stopped_by = status, stopped_by
        self.failures = (failures(collector, status, stopped_by)
                         if status or stopped_by is not None else ())
        self.usage_error = any(e.role == "adapter" and e.event == "error" and e.cause == "self"
                               for e in collector.events)

    def summary(self, text: str, collector: Collector) -> str:
        if self.graceful:
            text += grace_lines(collector, self.stop_grace or 0.0)
        return text

    def record(self) -> AttemptRecord:
        return AttemptRecord(self.index, self.status if self.status is not None else 1,
                             self.cause, self.stopped_by, self.usage_error,
                             failures=self.failures)


class _GraceCollector(Collector):
    """An adapter's ``grace-stop`` line says it stopped its worker gracefully and exited 0, as
    the launcher asked: no failure of that rank's."""

    def feed_status(self, event: Any) -> None:
        if event.event != GRACE_EVENT:
            super().feed_status(event)


def grace_lines(collector: Collector, grace: float) -> str:
    """The summary's lines after a graceful stop: which ranks' workers ended within the grace,
    which were killed at its end."""
    workers = {e.rank: e for e in collector.events   # by rank (one without a rank has no name here)
               if e.role == "worker" and e.cause == "terminated" and e.rank is not None}
    cut = sorted(r for r, e in workers.items() if e.signal == signal.SIGKILL)
    ended = sorted(r for r, e in workers.items() if e.signal != signal.SIGKILL)
    out = f"  graceful stop: SIGTERM to every worker, up to {grace:g} s to save\n"
    if ended:
        out += "  ended within the grace: " + ", ".join(f"rank {r}" for r in ended) + "\n"
    if cut:
        out += ("  save cut: " + ", ".join(f"rank {r}" for r in cut)
                + f" still running after the {grace:g} s grace, killed (SIGKILL); "
                "give a longer --term-grace\n")
    return out
