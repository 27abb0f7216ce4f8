"""Status lines, adapter -> launcher (docs/ARCHITECTURE.md): one ``@@mpilaunch {json}`` line on
stderr per terminal event, written with a single ``write`` so lines from ranks never mix.

Besides the terminal events, every adapter sends a few *lifecycle* lines (``cause: life``,
:func:`life`): adapter up, a child started (its pid), a worker's first output, a child that
exited 0. The launcher writes them to its event record (LOG_DIR/events.jsonl, docs/EVENTS.md)
and nowhere else: they are never a failure. They are written by hand, not with ``json``,
because every rank sends them and a plain rank imports no json (docs/ARCHITECTURE.md, start-up)."""
from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import List, Optional

from mpilaunch.contract import LIFE_CAUSE, STATUS_PREFIX


def status_line(rank: Optional[int], host: str, role: str, event: str, code: Optional[int],
                signal: Optional[int], cause: str, log: Optional[str],
                tail: Optional[List[str]] = None, message: Optional[str] = None,
                t: Optional[float] = None, exception: Optional[dict] = None) -> str:
    """One terminal status line; ``exception``: what a failed worker died of (rank/exception.py),
    sent only when known (a launcher reading an older adapter's line finds no such field)."""
    obj: dict = {"v": 1, "rank": rank, "host": host, "role": role, "event": event, "code": code,
           "signal": signal, "cause": cause, "log": log, "tail": list(tail or []),
           "t": round(time.time() if t is None else t, 3)}
    if message is not None:
        obj["message"] = message
    if exception is not None:
        obj["exception"] = exception
    import json  # only when a status line is written (a failure), not at every start

    return STATUS_PREFIX + json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n"


def write_stderr(text: str) -> None:
    data = text.encode("utf-8", "replace")
    try:
        while data:
            n = os.write(2, data)
            data = data[n:]
    except OSError:
        pass


def emit(rank: Optional[int], host: str, role: str, event: str, code: Optional[int],
         signal: Optional[int], cause: str, log: Optional[str],
         tail: Optional[List[str]] = None, message: Optional[str] = None,
         t: Optional[float] = None, exception: Optional[dict] = None) -> None:
    """:func:`status_line` to stderr, where the starter relays it to the launcher."""
    write_stderr(status_line(rank, host, role, event, code, signal, cause, log, tail, message,
                             t, exception))


def _text(value: str) -> str:
    """A JSON string: quote, backslash and control characters escaped (the rest is UTF-8)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    if any(c < " " for c in out):
        out = "".join(c if c >= " " else "\\u%04x" % ord(c) for c in out)
    return '"' + out + '"'


def _num(value: Optional[float]) -> str:
    return "null" if value is None else str(int(value))


def life_line(rank: Optional[int], host: str, role: str, event: str, pid: Optional[int] = None,
              code: Optional[int] = None, t: Optional[float] = None) -> str:
    """A lifecycle status line (``cause: life``): the same fields as :func:`status_line`, and
    the pid of the process it is about; readable by the launcher's ``json.loads``."""
    return (STATUS_PREFIX + '{"v":1,"rank":%s,"host":%s,"role":%s,"event":%s,"code":%s,'
            '"signal":null,"cause":"%s","log":null,"tail":[],"t":%.3f,"pid":%s}\n'
            % (_num(rank), _text(host), _text(role), _text(event), _num(code), LIFE_CAUSE,
               time.time() if t is None else t, _num(pid)))


def life(rank: Optional[int], host: str, role: str, event: str, pid: Optional[int] = None,
         code: Optional[int] = None) -> None:
    write_stderr(life_line(rank, host, role, event, pid=pid, code=code))
