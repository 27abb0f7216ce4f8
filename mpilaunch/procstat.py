"""One reader of ``/proc/PID/stat`` (Linux), for the launcher and the rank side alike.

Import-light on purpose (only ``os``): every rank may import it before the user's script starts.
The command name (field 2) is in parentheses and may itself hold spaces and ``)``, so the fields
are read after the *last* ``)``: field 3 (the state) first. Field numbers below are proc(5)'s.
"""
from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import List, Optional

ENDED = (b"Z", b"X")      # a zombie (or dead) process has ended: only its reaping is left
STOPPED = (b"T", b"t")    # stopped (SIGSTOP/SIGTSTP) or traced


def fields(pid: object) -> Optional[List[bytes]]:
    """The fields of ``/proc/<pid>/stat`` from field 3 (the state) on, or None when there is no
    such process (or it cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    cut = data.rfind(b")")
    return data[cut + 2:].split() if cut >= 0 else None


def state(pid: object) -> Optional[bytes]:
    """The process's state letter (field 3: ``R``, ``S``, ``Z``...), or None if it is gone."""
    got = fields(pid)
    return got[0][:1] if got else None


def running(pid: object) -> bool:
    """The process exists and has not ended (a zombie has: only its parent has not reaped it)."""
    got = state(pid)
    return got is not None and got not in ENDED


def parent(pid: object) -> Optional[int]:
    """The parent's pid (field 4), or None if the process is gone."""
    got = fields(pid)
    try:
        return int(got[1]) if got else None
    except (ValueError, IndexError):
        return None


def start_time(pid: object) -> Optional[int]:
    """The start time in clock ticks since boot (field 22), or None if there is no such process
    or it has ended: with the pid, it tells a live process from a reused pid."""
    got = fields(pid)
    if not got or got[0][:1] in ENDED:
        return None
    try:
        return int(got[19])
    except (ValueError, IndexError):
        return None
