"""A worker's first output, for the launcher's event record (a lifecycle status line).

A worker that is not tailed writes straight into its log file (no copy through the adapter),
so the adapter learns of its first output by looking at the log's size: every 5 ms at first,
the interval doubling up to 0.1 s for the first 10 s of the worker's life and up to 1 s after
(the time recorded is within one interval of the first write; a worker that never prints
costs one ``stat`` a second). The thread ends at the first output or when the worker exits.
"""
from __future__ import annotations

import os
import threading
import time

FIRST_DELAY = 0.005
EARLY, EARLY_MAX, LATE_MAX = 10.0, 0.1, 1.0


def wait_for_output(path: str, exited, report, start: float = None) -> bool:
    """Poll ``path`` until it is not empty (then ``report()``, True) or ``exited()`` (False).
    The size is looked at once more after the exit: output written just before it counts."""
    start = time.monotonic() if start is None else start
    delay = FIRST_DELAY
    while True:
        done = exited()
        try:
            size = os.stat(path).st_size
        except OSError:
            return False
        if size:
            report()
            return True
        if done:
            return False
        time.sleep(delay)
        cap = EARLY_MAX if time.monotonic() - start < EARLY else LATE_MAX
        delay = min(delay * 2, cap)


def watch(path: str, exited, report) -> threading.Thread:
    """:func:`wait_for_output` in a daemon thread (started by the worker's own thread, so it
    keeps that thread's blocked signals: they still reach only the adapter's main thread)."""
    thread = threading.Thread(target=wait_for_output, args=(path, exited, report),
                              name="first-output", daemon=True)
    thread.start()
    return thread
