"""Status lines from rank adapters, and the failure summary a person reads.

Adapters write ``@@mpilaunch {json}`` lines on stderr (docs/ARCHITECTURE.md). The root cause is
the earliest event with ``cause == "self"``; failures that are the teardown's consequence are
listed as such. When an adapter died without reporting (SIGKILL), mpirun's own "noticed that
process rank N ... exited on signal S" line is used instead.
"""
from __future__ import annotations

import signal
from collections import deque
from collections import namedtuple
from typing import (TYPE_CHECKING, Any, Container, Dict, List, NamedTuple, Optional, Protocol,
                    Sequence, Tuple)

from mpilaunch.contract import LIFE_CAUSE, STATUS_PREFIX
from mpilaunch.output.jsonline import loads

if TYPE_CHECKING:   # the checker's view of the fields; at run time a namedtuple (below)
    class _Fields(NamedTuple):   # (a test holds these names to the namedtuple's)
        rank: Optional[int]; host: str; role: str; event: str   # noqa: E702
        code: Optional[int]; signal: Optional[int]; cause: str   # noqa: E702
        log: Optional[str]; tail: List[str]; t: float   # noqa: E702
        message: Optional[str] = None; pid: Optional[int] = None   # noqa: E702
        exception: Optional[Dict[str, Any]] = None

    class _Reader(Protocol):   # backends.base.Backend, as the Collector reads the starter's words
        lost_why: str
        def notices(self, text: str) -> List["Event"]: ...   # noqa: E301
        def lost_hosts(self, text: str) -> List[str]: ...   # noqa: E301

    class _NotStarted(Protocol):   # check.results.CheckResult of a host where no daemon started
        @property
        def host(self) -> str: ...
        def line(self) -> str: ...   # noqa: E301
else:
    _Fields = namedtuple("Event", "rank host role event code signal cause log tail t message pid "
                         "exception", defaults=(None, None, None))


class Event(_Fields):
    """A rank's status line; ``pid``: the process a lifecycle line is about; ``exception``: what a
    failed worker died of (rank/exception.py). A namedtuple, typed for the checker only
    (docs/ARCHITECTURE.md, start-up)."""

    __slots__ = ()

    @classmethod
    def from_json(cls, payload: dict) -> "Event":
        exc = payload.get("exception")
        return cls(
            rank=payload.get("rank"), host=str(payload.get("host", "?")),
            role=str(payload.get("role", "worker")), event=str(payload.get("event", "exit")),
            code=payload.get("code"), signal=payload.get("signal"),
            cause=str(payload.get("cause", "self")), log=payload.get("log"),
            tail=[str(x) for x in payload.get("tail") or []], t=float(payload.get("t", 0.0)),
            message=payload.get("message"), pid=payload.get("pid"),
            exception=exc if isinstance(exc, dict) else None,
        )


def parse_status_line(line: str) -> Optional[Event]:
    if not line.startswith(STATUS_PREFIX):
        return None
    try:
        return Event.from_json(loads(line[len(STATUS_PREFIX):]))
    except (ValueError, TypeError):
        return None


class _Tail:
    """The last ``limit`` characters of a stream, kept as chunks (no quadratic copying)."""

    def __init__(self, limit: int):
        self.limit, self.size = limit, 0
        self.chunks: "deque[str]" = deque()

    def add(self, text: str) -> None:
        self.chunks.append(text)
        self.size += len(text)
        while self.size - len(self.chunks[0]) >= self.limit:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return "".join(self.chunks)[-self.limit:]


def who(event: Event) -> str:
    """``rank N (role)``, or ``a rank (role)`` when the rank is not known."""
    return f"{'a rank' if event.rank is None else f'rank {event.rank}'} ({event.role})"


def who_and_where(event: Event) -> str:
    """``rank N (role) on host H``: how every summary line, cause and record names a process
    (the host left out when it is not known)."""
    return who(event) + (f" on host {event.host}" if event.host not in ("", "?", None) else "")


class Collector:
    """What the launcher learns from the starter's two streams: the adapters' status lines,
    and the starter's own messages, which its backend reads (``Backend.notices``,
    ``Backend.lost_hosts``: Open MPI's PRRTE prints them on stdout, ORTE mostly on stderr)."""

    TAIL = 256 * 1024

    def __init__(self, backend: "_Reader") -> None:
        self.backend = backend   # backends.base.Backend: how its starter's words are read
        self.events: List[Event] = []
        self.unreachable: List[str] = []   # hosts a backend found unreachable (Hydra)
        self.not_started: Sequence[_NotStarted] = []   # checks of hosts where no daemon started
        self.ranks_seen: set = set()       # ranks that sent any status line: the job had started
        self.dead: List[Event] = []        # adapters whose control connection closed without a bye
        self._streams = {"stdout": _Tail(self.TAIL), "stderr": _Tail(self.TAIL)}

    def feed_status(self, event: Event) -> None:
        if event.cause == LIFE_CAUSE:   # where a rank is, not how it failed: events.jsonl only
            return
        self.events.append(event)

    def feed_text(self, text: str, stream: str = "stderr") -> None:
        self._streams[stream].add(text)

    @property
    def text(self) -> str:
        return "\n".join(t.text() for t in self._streams.values())

    @property
    def notices(self) -> List[Event]:
        """The starter's own reports of failed ranks (an adapter killed, ``--exec``)."""
        return self.backend.notices(self.text)

    def lost_hosts(self) -> List[str]:
        """Hosts the starter reported as lost, then those found unreachable, once each."""
        out: List[str] = []
        for host in self.backend.lost_hosts(self.text) + self.unreachable:
            if host not in out:
                out.append(host)
        return out

    def adapter_died(self, rank: int, pid: Optional[int], host: str, t: Optional[float] = None) -> None:
        """Rank ``rank``'s adapter died: its control connection closed without its last word
        (supervise/control.py). How it ended is read from the starter's report (:meth:`root_cause`)."""
        import time

        self.dead.append(Event(rank, host, "adapter", "exit", None, None, "self", None, [],
                               time.time() if t is None else t, message=DEAD_MESSAGE, pid=pid))

    def root_cause(self) -> Optional[Event]:
        """The earliest failure of a process on its own (a dead adapter's, with its signal from
        the starter's report), else the starter's own report of a failed rank. A process
        stopped by the teardown (``cause == "terminated"``) is a victim, never the root cause."""
        own = [e for e in self.events if e.cause == "self" and (e.code or e.signal)]
        notices = self.notices
        own += [how_it_ended(e, notices) for e in self.dead]
        if own:
            return min(own, key=lambda e: e.t)
        return notices[0] if notices else None


DEAD_MESSAGE = "its connection to the launcher closed without its last word (the adapter died)"
# What ends a process without its own last word: only these, and an interpreter crash's exit 1.
# MPICH's Hydra prints a killed process's signal as its "EXIT CODE" (backends/hydra_report.py):
# for an adapter that said no last word, a code among these is that signal.
_SILENT_DEATHS = (signal.SIGKILL, signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL,
                  signal.SIGFPE)


def how_it_ended(dead: Event, notices: List[Event]) -> Event:
    """``dead`` (a dead adapter) with its code or signal from the starter's report of the same
    rank, or from a report that names no rank (MPICH's: its PID is not always the dead
    process's, measured: rank 0's pid for rank 1's SIGKILLed adapter); unchanged when no
    report names it."""
    for n in notices:
        if n.rank == dead.rank or n.rank is None:
            sig = n.signal
            if sig is None and n.code in _SILENT_DEATHS:
                sig = n.code
            if sig:
                return dead._replace(signal=sig, code=128 + sig)
            if n.code:
                return dead._replace(code=n.code)
    return dead


def describe_failure(event: Event) -> str:
    """``exit code 1``, with the exception the rank found when it found one
    (``exit code 1: ValueError: bad batch size 0 (train.py:41 in load_batch)``)."""
    text = describe_status(event.code, event.signal)
    if not event.exception:
        return text
    from mpilaunch.output.exctext import exception_text   # a failed launch's only

    return f"{text}: {exception_text(event.exception)}"


def _exception_lines(exc: Optional[dict]) -> List[str]:
    if not exc:
        return []
    from mpilaunch.output.exctext import exception_lines   # a failed launch's only

    return exception_lines(exc)


def describe_status(code: Optional[int], sig: Optional[int]) -> str:
    if sig:
        return f"killed by signal {sig} ({signal_name(sig)})"
    return f"exit code {code}" if code is not None else "failed"


def signal_name(sig: int) -> str:
    """``SIGKILL``; ``signal 64`` for a number without a name."""
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def scheduler_hint(root: Optional[Event], scheduler: Optional[Tuple[bool, str]]) -> Optional[str]:
    """The fix when the launcher's guess about the scheduler was wrong (``scheduler``:
    (started, why) from config, or None): the scheduler copy failed in a job that may not be
    a MindSpore one, or a MindSpore worker failed without a scheduler."""
    if root is None or not scheduler:
        return None
    started, why = scheduler
    if started and root.role == "scheduler" and why != "--scheduler":
        return (f"  fix: rank 0 ran a MindSpore scheduler copy of the script ({why}); if this "
                "is not a MindSpore job, add --no-scheduler")
    text = " ".join(root.tail or []) + " " + (root.message or "")
    if not started and why not in ("--no-scheduler", "--exec") and "mindspore" in text.lower():
        return (f"  fix: no MindSpore scheduler was started ({why}); add --scheduler if this "
                "is a MindSpore job")
    return None


# The signals that are the workers' (docs/ARCHITECTURE.md, "Signals"): one that kills a process
# was the user's or the scheduler's, and the summary says where it came from.
USER_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def signal_note(sig: Optional[int], delivered: Container[int], program: str,
                starter: bool = False) -> Optional[str]:
    """Where the user signal ``sig`` that killed a process came from: sent to mpilaunch
    (``delivered``: the signals it gave to the workers) or straight to the ranks or the
    starter (``starter``: the starter itself died of it)."""
    if sig not in USER_SIGNALS:
        return None
    name = signal_name(sig)
    if starter:
        return (f"  signal: {name} was sent to {program} itself, which died of it (as without "
                f"mpilaunch); sent to mpilaunch it reaches every worker")
    if sig in delivered:
        return (f"  signal: {name} was sent to mpilaunch, which gave it to every worker; a "
                f"process without a handler for it dies of it, as under a bare {program}")
    return (f"  signal: {name} reached the ranks without going through mpilaunch (sent to "
            f"{program} or to the ranks, or by the scheduler: scancel --signal, sbatch "
            "--signal); a process without a handler for it dies of it")


def render_summary(collector: Collector, status: int, tail_lines: int = 10,
                   stopped_by: Optional[int] = None, starter_signal: Optional[int] = None,
                   scheduler: Optional[Tuple[bool, str]] = None, program: str = "mpirun",
                   delivered: Container[int] = (),
                   ranks_file: Optional[str] = None) -> str:
    """``status``: the job's exit status (``outcome.decide``); ``stopped_by``: the signal that
    asked mpilaunch to stop (the user or the platform); ``starter_signal``: the signal that
    ended the starter (``program``: mpirun, mpiexec, srun) itself, if one did; ``scheduler``:
    (started on rank 0, why), for :func:`scheduler_hint`; ``delivered``: the user signals
    mpilaunch gave to the workers (:func:`signal_note`); ``ranks_file``: where every rank's
    status was written (:func:`write_ranks_file`), named when the summary counts ranks."""
    lines = [f"mpilaunch: job failed (exit status {status})"]
    if stopped_by is not None:
        lines.append(f"  root cause: stopped by {signal_name(stopped_by)} sent to mpilaunch "
                     "(the user or the platform asked the job to stop)")
        _others(lines, collector, None, ranks_file)
        return "\n".join(lines) + "\n"
    if collector.not_started:
        _not_started(lines, collector.not_started, program)
        return "\n".join(lines) + "\n"
    lost = collector.lost_hosts()
    if lost:
        why = collector.backend.lost_why
        lines.append(f"  root cause: host {lost[0]} lost: {why} (host down, crashed or unreachable)")
        if len(lost) > 1:
            more = len(lost) - 1 - MAX_LISTED
            lines.append("  also lost: " + ", ".join(lost[1:1 + MAX_LISTED])
                         + (f" and {more} more" if more > 0 else ""))
        lines.append("  check it with: mpilaunch check --hostfile ... (same options as the launch)")
        return "\n".join(lines) + "\n"
    root = collector.root_cause()
    if root is None and starter_signal is not None:
        lines.append(f"  root cause: {program} itself was killed by signal {starter_signal} "
                     f"({signal_name(starter_signal)}); no rank reported a failure")
        note = signal_note(starter_signal, delivered, program, starter=True)
        if note:
            lines.append(note)
        _others(lines, collector, None, ranks_file)
        return "\n".join(lines) + "\n"
    if root is None:
        lines.append(f"  no rank reported a failure; see {program}'s messages above")
        _others(lines, collector, None, ranks_file)
        return "\n".join(lines) + "\n"
    lines.append(f"  root cause: {who_and_where(root)}: {describe_failure(root)}")
    note = signal_note(root.signal, delivered, program)
    if note:
        lines.append(note)
    if root.message:
        lines.append(f"  error: {root.message}")
    lines += _exception_lines(root.exception)
    if root.log:
        lines.append(f"  log: {root.log}")
    if root.tail:
        lines.append(f"  last {min(len(root.tail), tail_lines)} line(s) of the log:")
        lines += [f"    | {t}" for t in root.tail[-tail_lines:]]
    hint = scheduler_hint(root, scheduler)
    if hint:
        lines.append(hint)
    _others(lines, collector, root, ranks_file)
    return "\n".join(lines) + "\n"


MAX_LISTED = 8      # hosts or ranks named one by one in a summary; the rest are counted


def _not_started(lines: List[str], results: Sequence["_NotStarted"], program: str) -> None:
    """The hosts where the starter could not start its daemon, each with the ssh check that
    fails there and its fix (the preflight's words: check/hosts.py)."""
    hosts = list(dict.fromkeys(r.host for r in results))
    lines.append(f"  root cause: {program} could not start on {len(hosts)} host(s): "
                 f"{', '.join(hosts[:MAX_LISTED])}{', ...' if len(hosts) > MAX_LISTED else ''}")
    for r in results[:MAX_LISTED]:
        lines.append(f"    {r.line()}")
    if len(results) > MAX_LISTED:
        lines.append(f"    ... and {len(results) - MAX_LISTED} more")
    lines.append("  check them with: mpilaunch check --hostfile ... (same options as the launch)")


RANKS_FILE = "ranks.txt"   # every rank's last status, next to the logs (what the summary counts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _others(lines: List[str], collector: Collector, root: Optional[Event],
            ranks_file: Optional[str] = None) -> None:
    """The other ranks, readable at any size: those that failed on their own one by one (at
    most MAX_LISTED), those the teardown stopped and those that had finished as counts
    ("31 workers on 31 hosts stopped by the teardown"), and where the full list is."""
    seen, others = set(), []
    for e in collector.events:   # one line per process: a rank's worker, its scheduler copy
        if e is not root and (e.rank, e.role) not in seen:
            seen.add((e.rank, e.role))
            others.append(e)
    own = sorted((e for e in others if e.cause != "terminated" and (e.code or e.signal)),
                 key=lambda e: e.t)
    for e in own[:MAX_LISTED]:
        lines.append(f"  also failed on its own: {who_and_where(e)}: "
                     f"{describe_status(e.code, e.signal)}")
    if len(own) > MAX_LISTED:
        lines.append(f"  ... and {len(own) - MAX_LISTED} more failed on their own")
    for cause, what in (("terminated", "stopped by the teardown"), ("self", "had finished (exit 0)")):
        group = [e for e in others if e.cause == cause and (cause == "terminated" or not (e.code or e.signal))]
        for role in sorted({e.role for e in group}):
            mine = [e for e in group if e.role == role]
            hosts = {e.host for e in mine}
            lines.append(f"  {_plural(len(mine), role)} on {_plural(len(hosts), 'host')} {what}")
    if ranks_file and others:
        lines.append(f"  every rank: {ranks_file}")


def rank_lines(collector: Collector) -> List[str]:
    """One line per status line the ranks sent, by rank: the full list the summary counts."""
    out = []
    for e in sorted(collector.events, key=lambda e: (e.rank if e.rank is not None else -1, e.t)):
        how = ("stopped by the teardown" if e.cause == "terminated"
               else "failed on its own" if e.code or e.signal else "finished")
        out.append(f"rank {e.rank} ({e.role}) on host {e.host}: {e.event} "
                   f"{describe_status(e.code, e.signal)}, {how}" + (f"; log {e.log}" if e.log else ""))
    return out


def write_ranks_file(collector: Collector) -> Optional[str]:
    """Write :func:`rank_lines` to RANKS_FILE in the ranks' log dir (where their logs are);
    -> its path, or None (no rank reported a log, or it cannot be written)."""
    import os

    logs = [e.log for e in collector.events if e.log and os.path.isabs(e.log)]
    if len(collector.events) < 2 or not logs:
        return None
    path = os.path.join(os.path.dirname(logs[0]), RANKS_FILE)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("\n".join(rank_lines(collector)) + "\n")
    except OSError:
        return None
    return path
