"""A worker's first output, for the launcher's event record (a lifecycle status line).

A tailed worker's first output is seen by its relay (rank/relay.py: ``on_first``), at no
cost. A worker that is not tailed writes straight into its log file (no copy through the
adapter), so the adapter learns of its first output by looking at the log's size: every 5 ms
at first, the interval doubling up to 0.1 s for the first 10 s of the worker's life and up to
1 s after (the time recorded is within one interval of the first write; a worker that never
prints costs one ``stat`` a second). The watch ends at the first output, or when the worker
has exited (:meth:`Watch.stop`: one last look, so output written just before the exit counts).
"""
from __future__ import annotations

import os
import threading
import time

TYPE_CHECKING = False   # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import Callable

FIRST_DELAY = 0.005
EARLY, EARLY_MAX, LATE_MAX = 10.0, 0.1, 1.0


class Watch:
    def __init__(self, path: str, report: Callable[[], None]) -> None:
        self.path, self.report = path, report
        self.done = threading.Event()
        # started by the worker's own thread, so it keeps that thread's blocked signals: they
        # still reach only the adapter's main thread
        self.thread = threading.Thread(target=self.run, name="first-output", daemon=True)
        self.thread.start()

    def run(self) -> bool:
        start, delay = time.monotonic(), FIRST_DELAY
        while True:
            last = self.done.is_set()
            try:
                size = os.stat(self.path).st_size
            except OSError:
                return False
            if size:
                self.report()
                return True
            if last:
                return False
            self.done.wait(delay)
            cap = EARLY_MAX if time.monotonic() - start < EARLY else LATE_MAX
            delay = min(delay * 2, cap)

    def stop(self, timeout: float = 1.0) -> None:
        """The worker exited: the last look now, before its exit is reported."""
        self.done.set()
        self.thread.join(timeout)


def watch(path: str, report: Callable[[], None]) -> Watch:
    return Watch(path, report)
