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
from dataclasses import dataclass, field
from typing import List, Optional

STATUS_PREFIX = "@@mpilaunch "

_MPIRUN_NOTICE = re.compile(
    r"noticed that process rank (\d+) with PID (\d+) on node (\S+?)\.? exited on signal (\d+)"
)
_MPIRUN_EXIT = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+)", re.S)


@dataclass
class Event:
    rank: Optional[int]
    host: str
    role: str
    event: str
    code: Optional[int]
    signal: Optional[int]
    cause: str
    log: Optional[str]
    tail: List[str]
    t: float
    message: Optional[str] = None

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


@dataclass
class Collector:
    events: List[Event] = field(default_factory=list)
    notices: List[Event] = field(default_factory=list)
    _text: str = ""

    def feed_status(self, event: Event) -> None:
        self.events.append(event)

    def feed_text(self, text: str) -> None:
        """mpirun's own messages (kept short: only what the regexes need)."""
        self._text = (self._text + text)[-20000:]
        for m in _MPIRUN_NOTICE.finditer(text):
            sig = int(m.group(4))
            self.notices.append(Event(int(m.group(1)), m.group(3), "rank", "exit", 128 + sig, sig,
                                      "self", None, [], float("inf")))

    def root_cause(self) -> Optional[Event]:
        own = [e for e in self.events if e.cause == "self" and (e.code or e.signal)]
        if own:
            return min(own, key=lambda e: e.t)
        if self.notices:
            return self.notices[0]
        failed = [e for e in self.events if e.code or e.signal]
        return min(failed, key=lambda e: e.t) if failed else None


def describe_status(code: Optional[int], sig: Optional[int]) -> str:
    if sig:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by signal {sig} ({name})"
    return f"exit code {code}"


def render_summary(collector: Collector, status: int, tail_lines: int = 10) -> str:
    lines = [f"mpilaunch: job failed (exit status {status})"]
    root = collector.root_cause()
    if root is None:
        lines.append("  no rank reported a failure; see mpirun's messages above")
        return "\n".join(lines) + "\n"
    who = f"rank {root.rank}" if root.rank is not None else "a rank"
    lines.append(f"  root cause: {who} ({root.role}) on host {root.host}: {describe_status(root.code, root.signal)}")
    if root.message:
        lines.append(f"  error: {root.message}")
    if root.log:
        lines.append(f"  log: {root.log}")
    if root.tail:
        lines.append(f"  last {min(len(root.tail), tail_lines)} line(s) of the log:")
        lines += [f"    | {t}" for t in root.tail[-tail_lines:]]
    others = sorted(
        {(e.rank if e.rank is not None else -1, e.role, e.cause) for e in collector.events if e is not root}
    )
    if others:
        parts = [f"{r} {role} ({'stopped by the teardown' if cause == 'terminated' else 'failed too'})"
                 for r, role, cause in others]
        lines.append("  other ranks: " + ", ".join(parts))
    return "\n".join(lines) + "\n"
