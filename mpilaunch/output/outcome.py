"""The job's exit status, decided in one place, the same way for every backend, and the typed
record of a failure (:class:`Failure`) every later step reads instead of words.

In order (the first that applies):

1. a stop asked of mpilaunch (SIGINT, SIGTERM, SIGHUP): 128 + that signal, as a shell reports it;
2. the launcher ended the job at a failure its adapters had restarted in place, the last of
   ``--max_no_progress_restarts`` in a row without progress: that failure's status;
3. the stall watchdog ended the job: 124 (as ``timeout(1)``);
4. with ``--term-grace``, the ranks got a stop signal mpilaunch did not send (SIGTERM to a
   rank, Slurm's scancel to every process), saved and exited 0: 128 + that signal, the status
   the job has without ``--term-grace``;
5. a host was lost: 255 (also when the starter itself said 0: Open MPI 5 sometimes does);
6. the starter ended non-zero and a rank failed on its own: that rank's status (its exit code,
   or 128 + N for signal N: also a user's SIGUSR1/SIGUSR2 that killed a worker without a
   handler for it, forwarded by mpilaunch or not; the summary says which). Each starter has its own idea of its status after a failure
   (Hydra's mpiexec 15 or 255 after our SIGTERM, srun the status of a rank it tore down, Open
   MPI the first rank it noticed): the root cause the summary names is the one reported;
7. otherwise the starter's own status (128 + N when a signal ended it).

A usage error an adapter found is its exit 2 (rule 6); a preflight failure (1) and a usage
error found by the launcher (2) never start anything and so never reach here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Mapping, NamedTuple, Optional, Tuple

from mpilaunch.output.summary import describe_failure, signal_name, who_and_where

if TYPE_CHECKING:
    from mpilaunch.output.summary import Collector, Event

STALL_STATUS = 124
LOST_HOST_STATUS = 255


class Raised(NamedTuple):
    """The exception a failed worker died of, as its rank found it (rank/exception.py):
    ``type: message`` raised at ``file:line`` in ``function``; ``detail``: the rank's whole
    record of it (its source, the error file, the caller outside the libraries, the first
    exception of a chain), as docs/EVENTS.md's ``exception`` field."""

    type: str
    message: str
    file: Optional[str]
    line: Optional[int]
    function: Optional[str]
    detail: Mapping[str, Any]

    @property
    def where(self) -> str:
        """``file:line`` ('' when the rank found no frame)."""
        return f"{self.file}:{self.line}" if self.file else ""

    @classmethod
    def of(cls, detail: Optional[Mapping[str, Any]]) -> Optional["Raised"]:
        if not detail:
            return None
        line = detail.get("line")
        return cls(str(detail.get("type") or "Exception"), str(detail.get("message") or ""),
                   detail.get("file"), line if isinstance(line, int) else None,
                   detail.get("function"), dict(detail))


class Failure(NamedTuple):
    """One failure of an attempt, typed, from the launcher's part that saw it to the summary,
    the event record, the attempts' loop and the Python API (as torch's ``ProcessFailure``).
    ``kind``: one of :data:`KINDS`; ``cause``: the failure in words, as the summary and the
    attempts' list say it; the rest is what is known of the process (None where nothing is:
    a lost host has no rank, a stop no process)."""

    kind: str
    cause: str
    rank: Optional[int] = None
    host: Optional[str] = None
    role: Optional[str] = None
    code: Optional[int] = None
    signal: Optional[int] = None
    exception: Optional[Raised] = None
    log: Optional[str] = None
    message: Optional[str] = None
    pid: Optional[int] = None

    @property
    def text(self) -> str:
        """The cause in words (the Python API's name for it)."""
        return self.cause

    def to_json(self) -> Dict[str, object]:
        """A JSON object of the fields; ``exception``: the rank's whole record of it."""
        out: Dict[str, object] = dict(zip(self._fields, self))
        out["exception"] = None if self.exception is None else dict(self.exception.detail)
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Failure":
        def num(key: str) -> Optional[int]:
            value = obj.get(key)
            return value if isinstance(value, int) else None

        def text(key: str) -> Optional[str]:
            value = obj.get(key)
            return value if isinstance(value, str) else None

        return cls(text("kind") or UNREPORTED, text("cause") or "", num("rank"), text("host"),
                   text("role"), num("code"), num("signal"), Raised.of(obj.get("exception")),
                   text("log"), text("message"), num("pid"))


# The kinds of failure, each spelled once.
PROCESS = "process"            # a rank's process (worker, scheduler, adapter) failed on its own
HOST_LOST = "host lost"        # the starter lost a host (status 255)
NOT_STARTED = "not started"    # the starter could not start on a host
STOPPED = "stopped"            # a stop signal to mpilaunch, or one it did not send (--term-grace)
STALLED = "stalled"            # the stall watchdog ended the job (status 124)
UNREPORTED = "unreported"      # the starter failed and no rank said why
KINDS = (PROCESS, HOST_LOST, NOT_STARTED, STOPPED, STALLED, UNREPORTED)


def event_status(event: Event) -> int:
    """A status-line event's status: 128 + N for signal N, else its exit code."""
    return 128 + event.signal if event.signal else int(event.code or 0)


def decide(returncode: int, collector: Any, stopped_by: Optional[int] = None, stalled: bool = False,
           foreign_grace: Optional[int] = None, ended_at: Optional[int] = None) -> int:
    """``returncode``: the starter's, as Popen gives it (negative: killed by that signal);
    ``foreign_grace``: the stop signal of rule 4, if any; ``ended_at``: the status of rule 2's
    failure, if any."""
    status = 128 - returncode if returncode < 0 else returncode
    if stopped_by is not None:
        return 128 + stopped_by
    if ended_at is not None:
        return ended_at
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


def process_failure(event: Event) -> Failure:
    """A process that failed on its own (its status line, a dead adapter, the starter's report
    of it) as the typed record every later step reads."""
    return Failure(PROCESS, f"{who_and_where(event)}: {describe_failure(event)}", event.rank,
                   event.host if event.host not in ("", "?") else None, event.role, event.code,
                   event.signal, Raised.of(event.exception), event.log, event.message, event.pid)


def failures(collector: Collector, status: int, stopped_by: Optional[int] = None
             ) -> Tuple[Failure, ...]:
    """An attempt that ended with ``status`` (not 0), from what its Collector saw: its root
    cause first (a stop asked of mpilaunch, a host where the starter could not start, a lost
    host, the first process that failed on its own, else the starter's status), then every
    other process that failed on its own, one per rank and role, in the order they failed."""
    lost = collector.lost_hosts()
    if stopped_by is not None:
        first = Failure(STOPPED, f"stopped by {signal_name(stopped_by)}", signal=stopped_by)
    elif collector.not_started:
        host = collector.not_started[0].host
        first = Failure(NOT_STARTED, f"could not start on host {host}", host=host)
    elif lost:
        first = Failure(HOST_LOST, f"host {lost[0]} lost", host=lost[0])
    else:
        root = collector.root_cause()
        first = (process_failure(root) if root is not None else
                 Failure(UNREPORTED, f"exit status {status} (no rank reported a failure)"))
    out, seen = [first], {(first.rank, first.role)}
    for e in sorted(collector.events, key=lambda e: e.t):
        if e.cause == "self" and (e.code or e.signal) and (e.rank, e.role) not in seen:
            seen.add((e.rank, e.role))
            out.append(process_failure(e))
    return tuple(out)
