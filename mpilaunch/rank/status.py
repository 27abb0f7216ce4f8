"""Status lines, adapter -> launcher (docs/ARCHITECTURE.md): one ``@@mpilaunch {json}`` line on
stderr per terminal event, written with a single ``write`` so lines from ranks never mix."""
from __future__ import annotations

import os
import time

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import List, Optional

from mpilaunch.contract import STATUS_PREFIX


def status_line(rank: Optional[int], host: str, role: str, event: str, code: Optional[int],
                signal: Optional[int], cause: str, log: Optional[str],
                tail: Optional[List[str]] = None, message: Optional[str] = None,
                t: Optional[float] = None) -> str:
    obj = {"v": 1, "rank": rank, "host": host, "role": role, "event": event, "code": code,
           "signal": signal, "cause": cause, "log": log, "tail": list(tail or []),
           "t": round(time.time() if t is None else t, 3)}
    if message is not None:
        obj["message"] = message
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


def emit(*args, **kwargs) -> None:
    write_stderr(status_line(*args, **kwargs))
