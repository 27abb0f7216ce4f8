"""A rank adapter's process subtree, read from ``/proc`` (Linux).

Every rank pays for each import, and ``psutil`` was imported on each ``SIGCHLD``, i.e. on every
run (its cost: docs/ARCHITECTURE.md, start-up). ``/proc/<pid>/task/<tid>/children`` lists a
thread's children, zombies included; where the kernel lacks it (``CONFIG_PROC_CHILDREN``) the
parent of every process is read from ``/proc/<n>/stat`` instead, as psutil does.

PIDs are signalled by number: a direct child (or an orphan re-parented to the subreaper
adapter) cannot be reused before the adapter reaps it; a deeper descendant could in principle
exit and be replaced between the listing and the signal, the same window psutil leaves.
"""
from __future__ import annotations

import os

from mpilaunch import procstat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List


def _from_task_files(pid: int) -> List[int]:
    found: List[int] = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found.extend(int(x) for x in f.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue            # the thread ended while we looked
            raise                   # no such file at all: the kernel lacks it
    return found


def _parents() -> Dict[int, int]:
    """{pid: parent pid} of every process, from /proc/<n>/stat."""
    res = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = procstat.parent(name)
            if parent is not None:
                res[int(name)] = parent
    return res


_HAS_CHILDREN_FILES = None


def children(pid: int) -> List[int]:
    """The direct children of ``pid`` (all its threads), zombies included; [] once it is gone."""
    global _HAS_CHILDREN_FILES
    if _HAS_CHILDREN_FILES is not False:
        try:
            found = _from_task_files(pid)
            _HAS_CHILDREN_FILES = True
            return found
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}"):
                return []
            _HAS_CHILDREN_FILES = False
        except OSError:
            return []
    return [p for p, parent in _parents().items() if parent == pid]


def subtree(pid: int) -> List[int]:
    """Every descendant of ``pid``, parents before their children."""
    found: List[int] = []
    todo = children(pid)
    while todo:
        p = todo.pop(0)
        if p not in found:
            found.append(p)
            todo.extend(children(p))
    return found


def send(pids: List[int], sig: int) -> None:
    """``sig`` to each of ``pids``; one gone already (or not this user's) is passed over. The
    adapter's subtree, and the launcher's leftovers (supervise/leftovers.py)."""
    for p in pids:
        try:
            os.kill(p, sig)
        except OSError:     # gone already
            pass
