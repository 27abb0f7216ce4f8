"""The starter's streams: its stdout and stderr relayed to ours (the adapters' status lines
taken out into the Collector), our stdin given to it.

* stdout is relayed in large chunks (a bounded tail is kept for the starter's own messages,
  which Open MPI 5 prints there); stderr line by line, so the adapters' status lines can be
  collected. Both are written at the fd level: a closed or broken stdout never stops the
  draining (else the starter and the ranks would block on a full pipe).
"""
from __future__ import annotations

import os
import stat
import subprocess
import threading

from mpilaunch import events
from mpilaunch.summary import STATUS_PREFIX, Collector, parse_status_line


class ErrRelay(threading.Thread):
    """mpirun's stderr -> our stderr, minus the adapters' status lines."""

    def __init__(self, stream, collector: Collector, on_event):
        super().__init__(name="stderr-relay", daemon=True)
        self.stream = stream
        self.collector = collector
        self.on_event = on_event   # every status line (the backend's first-failure rule)

    def run(self) -> None:
        out = Sink(2)
        marker = STATUS_PREFIX.encode()
        for raw in iter(self.stream.readline, b""):
            if marker in raw:
                head, _, rest = raw.partition(marker)
                event = parse_status_line(STATUS_PREFIX + rest.decode("utf-8", "replace").rstrip("\r\n"))
                if event is not None:
                    events.status(event)   # the event record, launcher's clock (docs/EVENTS.md)
                    self.collector.feed_status(event)
                    self.on_event(event)
                    if not head.strip():
                        continue
                    raw = head + b"\n"
            self.collector.feed_text(raw.decode("utf-8", "replace"), "stderr")
            out.write(raw)


class OutRelay(threading.Thread):
    """mpirun's stdout -> our stdout in large chunks. Only a bounded tail is kept, for the
    messages Open MPI 5 prints there (a lost daemon, a rank killed by a signal)."""

    def __init__(self, stream, collector: Collector):
        super().__init__(name="stdout-relay", daemon=True)
        self.fd = stream.fileno()
        self.collector = collector

    def run(self) -> None:
        out = Sink(1)
        while True:
            data = os.read(self.fd, 1 << 20)
            if not data:
                return
            out.write(data)
            self.collector.feed_text(data.decode("utf-8", "replace"), "stdout")


class Sink:
    """Our stdout/stderr at the fd level. A closed fd (``mpilaunch ... >&-``: Python then has
    no ``sys.stdout`` at all) or a reader that went away (EPIPE) must not stop the relay: it
    keeps draining mpirun's pipe (else mpirun and the ranks block on a full pipe) and the
    ranks' log files keep their full copy."""

    def __init__(self, fd: int):
        self.fd, self.broken = fd, False

    def write(self, data: bytes) -> None:
        while data and not self.broken:
            try:
                n = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return
            data = data[n:]


def stdin_target(backend, plan):
    """``--stdin`` not given: rank 0 reads our stdin, as with bare mpirun; but when our stdin
    is closed or /dev/null, ``--stdin none``: Open MPI 5 never forwards the end of input, so a
    rank 0 reading stdin would wait forever (and a closed fd 0 must not be inherited)."""
    if backend.stdin(plan) is not None:
        return plan
    try:
        st = os.fstat(0)
        null = os.stat(os.devnull)
    except OSError:
        return backend.with_stdin(plan, "none")
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev:
        return backend.with_stdin(plan, "none")
    return plan


def stdin_for(target):
    """The starter's stdin: ours, which it forwards to the ``--stdin`` rank(s) (rank 0 by
    default, as bare mpirun does); /dev/null for ``--stdin none`` (see :func:`stdin_target`)."""
    if target == "none":
        return subprocess.DEVNULL
    try:
        os.fstat(0)
    except OSError:
        return subprocess.DEVNULL
    if os.isatty(0):
        # mpirun runs in its own process group (Ctrl-C reaches only us), so for the terminal
        # it is a background job: it never reads a tty stdin (measured: cpi waits forever on
        # 4.1 and 5.x). We read the terminal and feed mpirun a pipe.
        return subprocess.PIPE
    return None


class StdinRelay(threading.Thread):
    """Our terminal -> mpirun's stdin pipe, until end of input (Ctrl-D) or mpirun is gone."""

    def __init__(self, pipe):
        super().__init__(name="stdin-relay", daemon=True)
        self.fd = pipe.fileno()
        self.pipe = pipe

    def run(self) -> None:
        try:
            while True:
                data = os.read(0, 1 << 16)
                if not data:
                    break
                while data:
                    data = data[os.write(self.fd, data):]
        except OSError:
            pass
        finally:
            try:
                self.pipe.close()
            except OSError:
                pass
