"""Stacks on demand, rank side: the answer to the launcher's ``stacks ID`` (rank/control.py),
for ``mpilaunch stacks LOG_DIR`` (mpilaunch/stacks/, docs/HANGS.md).

The adapter runs ``py-spy dump`` on its own host, on each of its children (the worker, and
rank 0's MindSpore scheduler), in parallel, and answers with the text: one section per child,
``=== worker pid P`` / ``=== scheduler pid P``, then py-spy's output (``--full-filenames``), and
under each frame of the user's own code its source line (``    > text``), read here where the
file is (rank/pyspy.py's ``annotate``): the launcher's grouping (stacks/verdict.py) recognises an mpi4py collective by the call
on that line (py-spy shows no C frame without ``--native``).

Loaded only when a request arrives (the rank-side import budget: tests/rank/test_options.py);
py-spy is the ``stall`` extra, found and run by rank/pyspy.py (as for the stall watchdog). A child that is not a Python process (a native program) cannot be
read by py-spy: said in one line.
"""
from __future__ import annotations

import os
import threading

from mpilaunch.rank.pyspy import MISSING, annotate

NO_PY_SPY = f"no stacks: {MISSING}"
NATIVE = "--native"


def _role(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return "worker"
    return "scheduler" if b"MS_ROLE=MS_SCHED" in env else "worker"


def _is_py_spy(pid: int) -> bool:
    """One of the stall watchdog's own dumps, running as this adapter's child."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "py-spy"
    except OSError:
        return False


def _is_python(pid: int) -> bool:
    """The process runs a Python interpreter (its executable, or a libpython it mapped)."""
    try:
        exe = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        if exe.startswith("python"):
            return True
        with open(f"/proc/{pid}/maps") as f:
            return "libpython" in f.read()
    except OSError:
        return True     # let py-spy say what is wrong


def dump_rank(adapter_pid: int, native: bool = False) -> str:
    """The stacks of every child of the adapter ``adapter_pid`` (this process), as text."""
    from mpilaunch.rank import descendants, pyspy

    py_spy = pyspy.find(os.environ.get("PATH"))
    if not py_spy:
        return f"mpilaunch.rank: {NO_PY_SPY}\n"
    kids = [p for p in descendants.children(adapter_pid) if not _is_py_spy(p)]
    if not kids:
        return "mpilaunch.rank: no worker is running\n"
    texts = {}

    def one(pid: int) -> None:
        head = f"=== {_role(pid)} pid {pid}\n"
        if not _is_python(pid):
            texts[pid] = head + (f"mpilaunch.rank: pid {pid} is not a Python process: py-spy "
                                 "reads Python stacks only (gdb -p PID reads a native one)\n")
            return
        more = ["--full-filenames"] + ([NATIVE] if native else [])
        texts[pid] = head + annotate(pyspy.dump(pid, py_spy, more))

    threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in kids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(pyspy.DUMP_TIMEOUT + 5)
    return "".join(texts.get(p, f"=== {_role(p)} pid {p}\nmpilaunch.rank: py-spy did not answer\n")
                   for p in kids)
