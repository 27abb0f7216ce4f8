"""Hydra's (MPICH, Intel MPI) "BAD TERMINATION" block -> events for the summary. Pure.

Intel MPI::

    =   RANK 1 PID 4242 RUNNING AT node-b
    =   KILLED BY SIGNAL: 9 (Killed)

MPICH (no rank)::

    =   PID 4691 RUNNING AT 10.231.0.76
    =   EXIT CODE: 9

Used when an adapter died without a status line (SIGKILL). Blocks for SIGTERM (15) are the
teardown's victims (mpilaunch's own stop), never a root cause, and are skipped.
"""
from __future__ import annotations

import re
from typing import List

_BLOCK = re.compile(r"BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\s*\n"
                    r"=\s+(?:RANK\s+(\d+)\s+)?PID\s+(\d+)\s+RUNNING AT\s+(\S+)\s*\n"
                    r"=\s+(?:KILLED BY SIGNAL:\s*(\d+)|EXIT CODE:\s*(\d+))")
_TEARDOWN = 15


def bad_terminations(text: str) -> List[tuple]:
    """-> [(rank or None, pid, host, signal or None, exit code or None)], teardown ones left out.
    MPICH's "EXIT CODE: N" is given as it is (for a killed process it is the signal number)."""
    out = []
    for m in _BLOCK.finditer(text):
        rank = int(m.group(1)) if m.group(1) is not None else None
        sig = int(m.group(4)) if m.group(4) is not None else None
        code = int(m.group(5)) if m.group(5) is not None else None
        if (sig if sig is not None else code) == _TEARDOWN or (sig is None and not code):
            continue
        out.append((rank, int(m.group(2)), m.group(3), sig, code))
    return out
