"""The starter's streams: its stdout and stderr relayed to ours (the adapters' status lines
taken out into the Collector), our stdin given to it.

* stdout is relayed in large chunks (a bounded tail is kept for the starter's own messages,
  which Open MPI 5 prints there); stderr line by line, so the adapters' status lines can be
  collected. Both are written at the fd level: a closed or broken stdout never stops the
  draining (else the starter and the ranks would block on a full pipe).
* Open MPI's ``plm:ssh: Warning: setpgid(P,P) failed in parent with errno=Permission
  denied(13)`` lines are dropped: its ssh starter forks, the child calls setpgid(0, 0) itself
  and execs ssh, and the parent's own setpgid(pid, pid) fails with EACCES whenever the child
  got to exec first (POSIX: EACCES = the child has already exec'd). Open MPI ignores it ("the
  child is off and running"); it is a race whose odds grow with the hosts and the load
  (measured at 32 hosts: bare mpirun printed it in 2 of 3 runs, as often as through mpilaunch).
"""
from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
import time

from typing import IO, TYPE_CHECKING, Any, Callable, List, Optional, Sequence

from mpilaunch.backends import placement
from mpilaunch.output import events
from mpilaunch.output.summary import STATUS_PREFIX, Collector, Event, parse_status_line

if TYPE_CHECKING:
    from mpilaunch.backends.base import Plan

# Open MPI 5 (plm:ssh) and 4.1 (plm:rsh) word it alike; only EACCES is the harmless race.
# Compiled (re's cache) by the first line that names setpgid, not by every launch's import.
_SETPGID_RACE = (rb"plm:(?:ssh|rsh): Warning: setpgid\(\d+,\d+\) failed in parent "
                 rb"with errno=Permission denied\(13\)")


def is_noise(raw: bytes) -> bool:
    """A line of the starter's stderr that says nothing to the user (see the module's doc)."""
    return b"setpgid" in raw and re.search(_SETPGID_RACE, raw) is not None


class ErrRelay(threading.Thread):
    """mpirun's stderr -> our stderr, minus the adapters' status lines and :func:`is_noise`."""

    def __init__(self, stream: IO[bytes], collector: Collector, on_event: Callable[[Event], None],
                 progress: Optional["StartupLine"] = None) -> None:
        super().__init__(name="stderr-relay", daemon=True)
        self.stream = stream
        self.collector = collector
        self.on_event = on_event   # every status line (the backend's first-failure rule)
        self.progress = progress   # the start-up line (a terminal only), or None

    def run(self) -> None:
        try:
            self._relay()
        finally:
            if self.progress is not None:
                self.progress.finish()

    def _relay(self) -> None:
        out = Sink(2)
        marker = STATUS_PREFIX.encode()
        for raw in iter(self.stream.readline, b""):
            if marker in raw:
                head, _, rest = raw.partition(marker)
                event = parse_status_line(STATUS_PREFIX + rest.decode("utf-8", "replace").rstrip("\r\n"))
                if event is not None:
                    events.status(event)   # the event record, launcher's clock (docs/EVENTS.md)
                    if event.rank is not None:   # any line, the adapters' lifecycle ones too
                        self.collector.ranks_seen.add(event.rank)
                        if self.progress is not None:
                            self.progress.rank_up(event.rank, event.host)
                    self.collector.feed_status(event)
                    self.on_event(event)
                    if not head.strip():
                        continue
                    raw = head + b"\n"
            if is_noise(raw):
                continue
            self.collector.feed_text(raw.decode("utf-8", "replace"), "stderr")
            if self.progress is not None:
                self.progress.finish()   # the job talks: the start-up line goes for good
            out.write(raw)


class OutRelay(threading.Thread):
    """mpirun's stdout -> our stdout in large chunks. Only a bounded tail is kept, for the
    messages Open MPI 5 prints there (a lost daemon, a rank killed by a signal)."""

    def __init__(self, stream: IO[bytes], collector: Collector,
                 progress: Optional["StartupLine"] = None) -> None:
        super().__init__(name="stdout-relay", daemon=True)
        self.fd = stream.fileno()
        self.collector = collector
        self.progress = progress

    def run(self) -> None:
        out = Sink(1)
        while True:
            data = os.read(self.fd, 1 << 20)
            if not data:
                return
            if self.progress is not None:
                self.progress.finish()
            out.write(data)
            self.collector.feed_text(data.decode("utf-8", "replace"), "stdout")


START_LINE_AFTER = 2.0   # s: a launch that takes less shows no start-up line
START_LINE_EVERY = 0.5


class StartupLine:
    """On a terminal, while the ranks come up and once the launch has taken longer than
    ``after`` s: one line on stderr, redrawn in place, e.g. ``mpilaunch: starting: 40/128 ranks
    up, 12/32 hosts, waiting for node7 (3.4 s)``. A rank is up from its first status line. The
    line is erased once every rank is up, when the job ends, or as soon as the job prints
    anything. ``owners``: the host each rank was planned on (hostfile slots in order), or None
    when the user's own placement decides (then hosts are counted from the ranks' reports)."""

    def __init__(self, np: int, hosts: Sequence[str], owners: Optional[List[str]] = None, fd: int = 2, after: float = START_LINE_AFTER,
                 every: float = START_LINE_EVERY):
        self.np, self.hosts, self.owners = np, list(hosts), owners
        self.fd, self.after, self.every = fd, after, every
        self.up: dict = {}        # rank -> the host it reported
        self.t0 = time.monotonic()
        self.lock = threading.Lock()
        self.shown = False
        self.done = threading.Event()
        threading.Thread(target=self._run, name="startup-line", daemon=True).start()

    def rank_up(self, rank: int, host: str) -> None:
        with self.lock:
            self.up.setdefault(rank, host)
            complete = len(self.up) >= self.np
        if complete:
            self.finish()

    def text(self) -> str:
        with self.lock:
            up = dict(self.up)
        out = f"mpilaunch: starting: {len(up)}/{self.np} ranks up"
        if self.owners is not None:
            ready = {self.owners[r] for r in up if 0 <= r < len(self.owners)}
            waiting = [h for h in self.hosts if h not in ready]
            out += f", {len(ready)}/{len(self.hosts)} hosts"
            if waiting:
                out += f", waiting for {waiting[0]}" + (f" and {len(waiting) - 1} more" if len(waiting) > 1 else "")
        else:
            out += f" on {len(set(up.values()))} host(s)"
        return out + f" ({time.monotonic() - self.t0:.1f} s)"

    def finish(self) -> None:
        with self.lock:
            if self.done.is_set():
                return
            self.done.set()
            if self.shown:
                self._write("\r\x1b[K")

    def _run(self) -> None:
        if self.done.wait(self.after):
            return
        while True:
            line = self.text()
            with self.lock:
                if self.done.is_set():
                    return
                self._write("\r" + line + "\x1b[K")
                self.shown = True
            if self.done.wait(self.every):
                return

    def _write(self, text: str) -> None:
        try:
            os.write(self.fd, text.encode("utf-8", "replace"))
        except OSError:
            self.done.set()


def startup_line(plan: "Plan", fd: int = 2) -> Optional[StartupLine]:
    """The start-up line for ``plan`` when ``fd`` is a terminal, else None (a log, a pipe, a
    CI runner: nothing is drawn)."""
    try:
        if not os.isatty(fd):
            return None
    except OSError:
        return None
    np, hosts = int(plan.np), list(plan.hosts or ())
    owners = None
    slots = placement.slots_in_order(hosts)
    if hosts and len(slots) >= np and placement.mode(list(plan.args), False) == "exact":
        owners = [hosts[i].name for i in slots[:np]]
    return StartupLine(np, [h.name for h in hosts], owners, fd)


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


def stdin_target(backend: Any, plan: Any) -> Any:
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


def stdin_for(target: Optional[str]) -> Optional[int]:
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

    def __init__(self, pipe: IO[bytes]) -> None:
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
