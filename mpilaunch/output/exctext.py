"""A failed worker's exception as the failure summary, the attempts' list and the report
show it: one line, ``ValueError: bad batch size 0 (train.py:41 in load_batch)``. The rank
found it and sent it in its status line (mpilaunch/rank/exception.py, which says where it
comes from: torch's error file first, else the log's traceback); the launcher only words it
and never reads a remote file."""
from __future__ import annotations

from typing import List, Optional

EXCEPTION_CHARS = 200   # an exception's message on a summary line is cut to this


def _short_path(path: str) -> str:
    """A frame's file as the summary names it: its base name (a package's ``__init__.py`` /
    ``__main__.py`` with its directory); the full path is in the event record."""
    parts = path.split("/")
    if parts[-1] in ("__init__.py", "__main__.py") and len(parts) > 1 and parts[-2]:
        return "/".join(parts[-2:])
    return parts[-1]


def frame_text(frame: dict) -> str:
    """``train.py:41 in load_batch`` (``bad.py:3`` for a SyntaxError's frame); "" without a file."""
    if not frame.get("file"):
        return ""
    text = f"{_short_path(str(frame['file']))}:{frame.get('line')}"
    return text + (f" in {frame['function']}" if frame.get("function") else "")


def exception_text(exc: dict, cut: int = EXCEPTION_CHARS) -> str:
    """``ValueError: bad batch size 0 (train.py:41 in load_batch)``: the type, the message on
    one line (a multi-line message's lines joined, cut to ``cut`` characters), the raising
    frame, and the script's own frame that called into a library when it raised in one
    (``(linear.py:125 in forward, called from train.py:41 in step)``)."""
    message = " ".join(line.strip() for line in str(exc.get("message") or "").splitlines()
                       if line.strip())
    if len(message) > cut:
        message = message[:cut - 3] + "..."
    kind = exc.get("type")
    text = f"{kind}: {message}" if kind and message else str(kind or message or "an exception")
    where = frame_text(exc)
    caller = exc.get("caller")
    if where and isinstance(caller, dict) and frame_text(caller):
        where += f", called from {frame_text(caller)}"
    return text + (f" ({where})" if where else "")


_LINKS = {"cause": "caused by", "context": "raised while handling"}


def exception_lines(exc: Optional[dict]) -> List[str]:
    """The summary's lines under the root cause's about its exception: the first exception of
    a chain, and the error file it was read from."""
    if not exc:
        return []
    out = []
    first = exc.get("first")
    if isinstance(first, dict):
        out.append(f"  {_LINKS.get(str(first.get('link')), 'chained to')}: {exception_text(first)}")
    if exc.get("source") == "error_file" and exc.get("error_file"):
        out.append(f"  error file: {exc['error_file']}")
    return out
