"""Status lines from rank adapters, and the failure summary a person reads.

Adapters write ``@@mpilaunch {json}`` lines on stderr (docs/ARCHITECTURE.md). The root cause is
the earliest event with ``cause == "self"``; failures that are the teardown's consequence are
listed as such. When an adapter died without reporting (SIGKILL), mpirun's own "noticed that
process rank N ... exited on signal S" line is used instead.
"""
from __future__ import annotations

import json
import re
import signal
from collections import deque
from collections import namedtuple
from typing import List, Optional

from mpilaunch.contract import STATUS_PREFIX

# Open MPI wraps this notice at any space ("exited on\nsignal 9" on 5.x): match any whitespace.
_MPIRUN_NOTICE = re.compile(
    r"noticed\s+that\s+process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+?)\.?"
    r"\s+exited\s+on\s+signal\s+(\d+)"
)
# Open MPI's own report of the first process that failed, for processes that send no status
# line (``--exec``: the MPI program runs without an adapter). 4.1: ``Process name: [[J,1],R]``;
# 5.x: ``Process name: [prterun-HOST-PID@1,R]``; both followed by ``Exit code: N``.
_MPI_FAILED = re.compile(
    r"Process\s+name:\s*\[(?:\[\d+,\d+\],(\d+)|prterun-(\S+)-\d+@\d+,(\d+))\]\s*Exit\s+code:\s*(\d+)")
# MPI_Abort: 5.x names rank and node; the Errorcode comes from MPI_ABORT's own notice.
_MPI_ABORT_NODE = re.compile(
    r"exited\s+due\s+to\s+process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+(\S+?)\s+calling\s+\"abort\"")
_MPI_ABORT_CODE = re.compile(r"MPI_ABORT\s+was\s+invoked\s+on\s+rank\s+(\d+)\s.*?Errorcode:\s*(\d+)", re.S)
# Open MPI's words for a host whose daemon is gone (crashed, powered off, link down).
_LOST_HOST = [
    re.compile(r"(?:ORTE|PRTE) has lost communication with a remote daemon.*?Remote daemon:\s*\S+ on node (\S+)", re.S),
    re.compile(r"A daemon failed to report back.*?Remote host:\s+(\S+)", re.S),
    re.compile(r"Connection to (\S+) closed by remote host"),
]


class Event(namedtuple("Event", "rank host role event code signal cause log tail t message", defaults=(None,))):
    """rank: Optional[int];
    host: str;
    role: str;
    event: str;
    code: Optional[int];
    signal: Optional[int];
    cause: str;
    log: Optional[str];
    tail: List[str];
    t: float;
    message: Optional[str].
    (A namedtuple: ``dataclasses`` costs ~12 ms of start-up at every launch.)"""

    __slots__ = ()

    @classmethod
    def from_json(cls, payload: dict) -> "Event":
        return cls(
            rank=payload.get("rank"), host=str(payload.get("host", "?")),
            role=str(payload.get("role", "worker")), event=str(payload.get("event", "exit")),
            code=payload.get("code"), signal=payload.get("signal"),
            cause=str(payload.get("cause", "self")), log=payload.get("log"),
            tail=[str(x) for x in payload.get("tail") or []], t=float(payload.get("t", 0.0)),
            message=payload.get("message"),
        )


def parse_status_line(line: str) -> Optional[Event]:
    if not line.startswith(STATUS_PREFIX):
        return None
    try:
        return Event.from_json(json.loads(line[len(STATUS_PREFIX):]))
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


class Collector:
    """What the launcher learns from mpirun's two streams: the adapters' status lines, and
    Open MPI's own messages (which PRRTE prints on stdout, ORTE mostly on stderr)."""

    TAIL = 256 * 1024

    def __init__(self) -> None:
        self.events: List[Event] = []
        self.unreachable: List[str] = []   # Hydra: hosts whose ssh port stopped answering
        self._streams = {"stdout": _Tail(self.TAIL), "stderr": _Tail(self.TAIL)}

    def feed_status(self, event: Event) -> None:
        self.events.append(event)

    def feed_text(self, text: str, stream: str = "stderr") -> None:
        self._streams[stream].add(text)

    @property
    def _text(self) -> str:
        return "\n".join(t.text() for t in self._streams.values())

    @property
    def notices(self) -> List[Event]:
        """mpirun's "noticed that process rank N ... exited on signal S" (adapter killed)."""
        out = []
        for m in _MPIRUN_NOTICE.finditer(self._text):
            sig = int(m.group(4))
            out.append(Event(int(m.group(1)), m.group(3), "rank", "exit", 128 + sig, sig,
                             "self", None, [], float("inf")))
        from mpilaunch.hydra_report import bad_terminations   # Hydra: MPICH, Intel MPI
        for rank, pid, host, sig, code in bad_terminations(self._text):
            out.append(Event(rank, host, "rank", "exit", code if sig is None else 128 + sig, sig, "self",
                             None, [], float("inf"), message=f"pid {pid} (Hydra's report)"))
        return out

    @property
    def mpi_reports(self) -> List[Event]:
        """Open MPI's own report of a failed process (exit code, or MPI_Abort)."""
        text = self._text
        out = []
        for m in _MPI_FAILED.finditer(text):
            rank = int(m.group(1) if m.group(1) is not None else m.group(3))
            out.append(Event(rank, m.group(2) or "?", "process", "exit", int(m.group(4)), None,
                             "self", None, [], float("inf")))
        codes = {int(m.group(1)): int(m.group(2)) for m in _MPI_ABORT_CODE.finditer(text)}
        for m in _MPI_ABORT_NODE.finditer(text):
            rank = int(m.group(1))
            out.append(Event(rank, m.group(2), "process", "exit", codes.pop(rank, None), None, "self",
                             None, [], float("inf"), message="the process called MPI_Abort"))
        for rank, code in codes.items():
            out.append(Event(rank, "?", "process", "exit", code, None, "self", None, [], float("inf"),
                             message="the process called MPI_Abort"))
        return out

    def lost_hosts(self) -> List[str]:
        """Hosts Open MPI reported as lost, in the order first seen."""
        found: List[tuple] = []
        for pattern in _LOST_HOST:
            for m in pattern.finditer(self._text):
                found.append((m.start(), m.group(1).rstrip(".,")))
        out: List[str] = []
        for host in [h for _, h in sorted(found)] + self.unreachable:
            if host not in out:
                out.append(host)
        return out

    def root_cause(self) -> Optional[Event]:
        """The earliest failure of a process on its own, else mpirun's notice of a rank killed
        by a signal. A process stopped by the teardown (``cause == "terminated"``) is a
        victim, never the root cause."""
        own = [e for e in self.events if e.cause == "self" and (e.code or e.signal)]
        if own:
            return min(own, key=lambda e: e.t)
        notices = self.notices
        if notices:
            return notices[0]
        reports = self.mpi_reports
        if reports:
            return reports[0]
        return None


def describe_status(code: Optional[int], sig: Optional[int]) -> str:
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by signal {sig} ({name})"
    return f"exit code {code}" if code is not None else "failed"


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def scheduler_hint(root: Optional[Event], scheduler) -> Optional[str]:
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


def render_summary(collector: Collector, status: int, tail_lines: int = 10,
                   stopped_by: Optional[int] = None, mpirun_signal: Optional[int] = None,
                   scheduler=None) -> str:
    """``stopped_by``: the signal that asked mpilaunch to stop (the user or the platform);
    ``mpirun_signal``: the signal that ended mpirun itself, if one did; ``scheduler``:
    (started on rank 0, why), for :func:`scheduler_hint`."""
    lines = [f"mpilaunch: job failed (exit status {status})"]
    if stopped_by is not None:
        lines.append(f"  root cause: stopped by {_signal_name(stopped_by)} sent to mpilaunch "
                     "(the user or the platform asked the job to stop)")
        _others(lines, collector, None)
        return "\n".join(lines) + "\n"
    lost = collector.lost_hosts()
    if lost:
        why = ("its ssh port no longer answers and Hydra lost its proxy there" if lost[0] in collector.unreachable
               else "Open MPI lost its daemon there")
        lines.append(f"  root cause: host {lost[0]} lost: {why} (host down, crashed or unreachable)")
        if len(lost) > 1:
            lines.append("  also lost: " + ", ".join(lost[1:]))
        lines.append("  check it with: mpilaunch check --hostfile ... (same options as the launch)")
        return "\n".join(lines) + "\n"
    root = collector.root_cause()
    if root is None and mpirun_signal is not None:
        lines.append(f"  root cause: mpirun itself was killed by signal {mpirun_signal} "
                     f"({_signal_name(mpirun_signal)}); no rank reported a failure")
        _others(lines, collector, None)
        return "\n".join(lines) + "\n"
    if root is None:
        lines.append("  no rank reported a failure; see mpirun's messages above")
        _others(lines, collector, None)
        return "\n".join(lines) + "\n"
    who = f"rank {root.rank}" if root.rank is not None else "a rank"
    where = f" on host {root.host}" if root.host not in ("", "?") else ""
    lines.append(f"  root cause: {who} ({root.role}){where}: {describe_status(root.code, root.signal)}")
    if root.message:
        lines.append(f"  error: {root.message}")
    if root.log:
        lines.append(f"  log: {root.log}")
    if root.tail:
        lines.append(f"  last {min(len(root.tail), tail_lines)} line(s) of the log:")
        lines += [f"    | {t}" for t in root.tail[-tail_lines:]]
    hint = scheduler_hint(root, scheduler)
    if hint:
        lines.append(hint)
    _others(lines, collector, root)
    return "\n".join(lines) + "\n"


def _others(lines: List[str], collector: Collector, root: Optional[Event]) -> None:
    others = sorted(
        {(e.rank if e.rank is not None else -1, e.role, e.cause) for e in collector.events if e is not root}
    )
    if others:
        parts = [f"{r} {role} ({'stopped by the teardown' if cause == 'terminated' else 'failed too'})"
                 for r, role, cause in others]
        lines.append("  other ranks: " + ", ".join(parts))
