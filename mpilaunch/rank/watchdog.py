"""Stall watchdog, rank side: has this rank's worker shown progress?

**Progress** is either of:

* the worker's log file grew (anything the worker wrote reached ``worker_<rank>.log``;
  Python block-buffers ``print`` into a file or pipe, so flush, or set ``PYTHONUNBUFFERED=1``);
* the heartbeat file changed: every worker gets ``MPILAUNCH_HEARTBEAT_FILE`` (a path in the
  log dir) and may touch it, e.g. ``pathlib.Path(os.environ["MPILAUNCH_HEARTBEAT_FILE"]).touch()``
  once per step, when it prints nothing for long stretches.

When neither changed for ``timeout`` s, the rank is *silent*: its worker's Python stacks are
dumped to ``stacks_<rank>.txt`` in the log dir (``py-spy dump``, an optional dependency:
``pip install py-spy`` or ``mpilaunch[stall]``; without it the file and the summary say so),
and a status line ``event: stall`` goes to the launcher; progress after that sends
``event: progress``. The launcher (``mpilaunch/attempts/restart.py``) ends the job only when **every**
rank is silent at once, so a rank that computes quietly while others log is never a stall.
The watchdog polls two ``stat`` calls every ``min(1, timeout/4)`` s.

A **suspended** job is not silent: while the worker is stopped (SIGTSTP forwarded to it,
Slurm's ``scontrol suspend``) no time counts, and neither does a gap in the watchdog's own
polling (the adapter was stopped with it: Open MPI stops the whole process group, Slurm
every process of the job).
"""
from __future__ import annotations

import os
import threading
import time

from mpilaunch import procstat

TYPE_CHECKING = False   # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import Callable, List, Optional, Tuple
from mpilaunch.pdeathsig import SignalsBlocked
from mpilaunch.rank import pyspy, status

HEARTBEAT_VAR = "MPILAUNCH_HEARTBEAT_FILE"
STOPPED_GAP = 1.0   # a poll this much later than due: the adapter itself was stopped


def heartbeat_path(log_dir: str, rank: int) -> str:
    return os.path.abspath(os.path.join(log_dir, f"heartbeat_{rank}"))


def stacks_path(log_dir: str, rank: int) -> str:
    return os.path.abspath(os.path.join(log_dir, f"stacks_{rank}.txt"))


def _mark(path: str) -> Optional[Tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def dump_stacks(pid: int, out_path: str, py_spy: str) -> str:
    """Write the stacks of ``pid`` (and its Python children) to ``out_path``; a one-line note."""
    if not py_spy:
        note = f"no stacks: {pyspy.MISSING}"
        _write(out_path, note + "\n")
        return note
    texts = [pyspy.dump(p, py_spy) for p in [pid] + _children(pid)]
    _write(out_path, "\n".join(texts))
    return f"stacks: {out_path}"


def is_stopped(pid: Optional[int]) -> bool:
    """``pid`` is stopped (state T: SIGTSTP/SIGSTOP) or traced (t)."""
    return procstat.state(pid) in procstat.STOPPED


def _children(pid: int) -> List[int]:
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except Exception:
        return []


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass


class Watchdog(threading.Thread):
    """Watches one worker; ``pid_of()`` gives its pid (None before it started)."""

    def __init__(self, timeout: float, log_path: str, heartbeat: str, stacks: str,
                 pid_of: Callable[[], Optional[int]], rank: int, host: str, py_spy: str,
                 status_of: Callable[[], Optional[int]] = lambda: None) -> None:
        super().__init__(name="stall-watchdog", daemon=True)
        self.timeout, self.paths = timeout, (os.path.abspath(log_path), heartbeat)
        self.stacks, self.pid_of, self.rank, self.host = stacks, pid_of, rank, host
        self.py_spy, self.status_of = py_spy, status_of
        self.done = threading.Event()

    def start(self) -> None:
        """Started with the adapter's signals blocked (as the supervisor's helper threads), so
        the kernel delivers them to the main thread, whose wait they must interrupt."""
        with SignalsBlocked():
            super().start()

    def run(self) -> None:
        period = min(1.0, self.timeout / 4)
        marks = [_mark(p) for p in self.paths]
        last = polled = time.monotonic()
        silent = False
        while not self.done.wait(period):
            if self.status_of() is not None:    # the worker ended: a success is not silence
                if self.status_of() == 0:
                    status.emit(self.rank, self.host, "worker", "done", 0, None, "stall",
                                self.paths[0], [])
                return
            now_marks = [_mark(p) for p in self.paths]
            now = time.monotonic()
            if now - polled > period + STOPPED_GAP:     # we were stopped too: not the worker's time
                last += now - polled - period
            polled = now
            if is_stopped(self.pid_of()):               # suspended, not stalled
                last = now
            if now_marks != marks:
                marks, last = now_marks, now
                if silent:
                    silent = False
                    status.emit(self.rank, self.host, "worker", "progress", None, None, "stall",
                                self.paths[0], [])
                continue
            if silent or now - last < self.timeout:
                continue
            silent = True
            pid = self.pid_of()
            note = (dump_stacks(pid, self.stacks, self.py_spy) if pid is not None
                    else "the worker has not started")
            status.emit(self.rank, self.host, "worker", "stall", None, None, "stall",
                        self.paths[0], [], message=f"no progress for {now - last:.0f} s; {note}")
