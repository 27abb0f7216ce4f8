"""In-place restarts: the adapters' coordination without MPI (rank/inplace/loop.py says what for).

Rank 0's adapter is the :class:`Coordinator`; every adapter, rank 0's too, talks to it through
a :class:`Client`. Lines, one per message:

* adapter -> coordinator: ``fail K JSON`` (its worker or scheduler failed on its own in
  attempt K; JSON: the status line it would have written), ``done K RANK`` (its worker
  exited 0);
* coordinator -> adapters: ``restart K PORT`` (attempt K starts now, rendezvous at PORT,
  picked and released on rank 0's host), or ``restart K PORT held`` (rank 0's store holder,
  rank/inplace/hold.py, already listens on PORT: every rank's worker is then its client),
  ``finish K`` (every rank's worker exited 0);
  ``end K`` to an adapter that reported a failure of attempt K that is not restarted in
  place: the ``no_progress``-th attempt in a row that made no progress (:func:`no_progress`;
  ``--max_no_progress_restarts``: a script failing at import fails the same way every time);
  that adapter reports it and exits, and the launcher ends the job.

The first ``fail K`` of attempt K (a later one is a consequence: a peer's gloo broke) restarts
at once; ``ROOT_WINDOW`` s later one status line ``event: restart-in-place`` names the
earliest failure it got.
"""
from __future__ import annotations

import json
import socket
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, Iterable, List, Optional, Set, Tuple

    # where an adapter's Client puts ("restart", K), ("finish", K), ("end", K)
    Deliver = Callable[[Tuple[str, int]], None]

from mpilaunch.contract import RESTART_EVENT   # the coordinator's status line (launcher: restart.py)
from mpilaunch.rank import status

ROOT_WINDOW = 0.2       # s the coordinator gathers failures before it names the attempt's root
CONNECT_WAIT = 10.0     # s an adapter with a failed worker tries to reach the coordinator
# s: the launcher's LEAD (mpilaunch/attempts/progress.py): a worker made progress when its first
# output came at least this long before the attempt's first failure
QUICK = 5.0


def no_progress(info: dict, age: float) -> bool:
    """The first failure of an attempt (``info``: its ``t`` and the failed worker's
    ``first_output``, wall clock) ``age`` s after the attempt's start made no progress: the
    attempt was younger than QUICK s, or that worker wrote nothing QUICK s before it failed.
    The launcher's rule looks at every rank's output; this one sees the failed rank's only,
    so it may call an attempt idle where the launcher does not: the launcher then relaunches
    instead of ending the job (mpilaunch/attempts/loop.py judge)."""
    first, t = info.get("first_output"), info.get("t")
    if age < QUICK:
        return True
    return first is None or t is None or t - first < QUICK


def _pick_port() -> int:
    s = socket.socket()
    try:
        s.bind(("", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def _lines(sock: socket.socket, handle: Callable[[str, str], None]) -> None:
    """Read ``sock`` line by line into ``handle(words, rest)`` until it closes."""
    buf = b""
    while True:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            return
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            text = line.decode("utf-8", "replace")
            head, _, rest = text.partition(" ")
            handle(head, rest)


class Coordinator:
    """Rank 0's adapter: the attempt every rank is at, the failures and the finished workers."""

    def __init__(self, port: int, attempt: int, last: int, size: int, host: str,
                 no_progress: Optional[int] = None):
        self.attempt, self.last, self.size, self.host = attempt, last, size, host
        self.no_progress = no_progress      # None: restart every failure in place
        self.started = time.monotonic()     # the current attempt's start
        self.quick = 0                      # attempts in a row that made no progress
        self.ended: Optional[int] = None    # the attempt not restarted (end K)
        self.lock = threading.Lock()
        # held from taking an attempt's failures to writing its restart line: the lines go
        # out in the attempts' order, and every one before an adapter is told ``end K``
        self.naming = threading.Lock()
        self.conns: List[socket.socket] = []
        self.done: Set[str] = set()
        self.failures: Dict[int, List[dict]] = {}   # attempt -> the failures it reported
        self.local: Optional[Client] = None        # rank 0's own Client (its messages)
        # (attempt, port) -> True once rank 0's store holder listens on port (hold.py); None:
        # no holder, every restart as without one
        self.hold: Optional[Callable[[int, int], bool]] = None
        self.held = False       # the current attempt's port is the holder's
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("", port))     # OSError: the caller goes without in-place restarts
        self.sock.listen(256)
        threading.Thread(target=self._accept, name="inplace-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(conn)
                current = self.attempt
                port = getattr(self, "port", None)
                held = " held" if self.held else ""
            if port is not None:        # a late adapter: where everyone else is
                self._send([conn], f"restart {current} {port}{held}\n")
            threading.Thread(target=_lines, args=(conn, lambda h, r, c=conn: self.message(h, r, c)),
                             daemon=True).start()

    def _send(self, conns: Iterable[socket.socket], text: str) -> None:
        data = text.encode()
        for c in conns:
            try:
                c.sendall(data)
            except OSError:
                pass

    def message(self, head: str, rest: str, conn: Optional[socket.socket] = None) -> None:
        """One line from an adapter (``conn``; None: rank 0's own)."""
        said, _, payload = rest.partition(" ")
        try:
            k = int(said)
        except ValueError:
            return
        if head == "fail":
            try:
                info = json.loads(payload)
            except ValueError:
                info = {}
            if not self.failed(k, info):
                self._end(k, conn)
        elif head == "done":
            self.finished(k, payload)

    def failed(self, k: int, info: dict) -> bool:
        """A failure of attempt ``k``: False when it is not restarted in place (the adapter
        is told ``end K``)."""
        with self.lock:
            if self.ended == k:
                return False
            if k in self.failures and k != self.attempt:
                self.failures[k].append(info)   # within the window: a candidate root cause
                return True
            if k != self.attempt:
                return True             # a consequence of a failure already acted on
            got = self.failures.setdefault(k, [])
            got.append(info)
            if len(got) > 1 or k >= self.last:
                return True
            idle = no_progress(info, time.monotonic() - self.started)
            self.quick = self.quick + 1 if idle else 0
            if self.no_progress and self.quick >= self.no_progress:
                self.ended = k
                return False
            self.attempt, self.port = k + 1, _pick_port()
            self.done, self.started = set(), time.monotonic()
            # the store first (a bounded wait: hold.HOLD_WAIT), then the word: "held" only
            # once the holder said it listens, so no rank's worker is ever a client of a port
            # nobody serves. Not held after asking: a port the holder was never given (a slow
            # one may still bind the asked one, and rank 0's worker must bind its own)
            self.held = False
            if self.hold is not None:
                try:
                    self.held = self.hold(k + 1, self.port)
                except Exception:    # never the restart's end: it goes without the holder
                    self.held = False
                if not self.held:
                    self.port = _pick_port()
            port, held = self.port, self.held
            conns, text = list(self.conns), f"restart {k + 1} {port}{' held' if held else ''}\n"
        self._send(conns, text)
        if self.local is not None:
            self.local.restart(k + 1, port, held)
        threading.Timer(ROOT_WINDOW, self._name_root, args=(k,)).start()
        return True

    def _end(self, k: int, conn: Optional[socket.socket]) -> None:
        # the adapter told ``end K`` reports its failure and exits, and the launcher tears the
        # job down at once: every attempt restarted before K is named first (a restart within
        # ROOT_WINDOW of this end would otherwise go with rank 0's adapter, and the launcher
        # would count this attempt as the one after the last restart it heard of)
        self._name_roots()
        if conn is None and self.local is not None:
            self.local.end(k)
        elif conn is not None:
            self._send([conn], f"end {k}\n")

    def _name_root(self, k: int) -> None:
        with self.naming:
            self._name_root_held(k)

    def _name_root_held(self, k: int) -> None:
        with self.lock:
            got = self.failures.pop(k, [])
        if not got:
            return          # named already: the attempt after it ended within the window
        root = min(got, key=lambda i: i.get("t", 0.0))
        status.emit(root.get("rank"), root.get("host", "?"), root.get("role", "worker"),
                    RESTART_EVENT, root.get("code"), root.get("signal"), "restart",
                    root.get("log"), root.get("tail") or [],
                    message=f"attempt {k} failed; attempt {k + 1} started in place",
                    t=root.get("t"), exception=root.get("exception"))

    def finished(self, k: int, rank: str) -> None:
        with self.lock:
            if k != self.attempt:
                return
            self.done.add(rank)
            if len(self.done) < self.size:
                return
            conns = list(self.conns)
        self._name_roots()
        self._send(conns, f"finish {k}\n")
        if self.local is not None:
            self.local.finish(k)

    def _name_roots(self) -> None:
        """Every restart's root cause not yet named: an attempt restarted in place that ends
        within ``ROOT_WINDOW`` (or the last of the budget, whose adapters leave at once) still
        tells the launcher why it was restarted, before the adapters go."""
        with self.naming:
            with self.lock:     # the attempts restarted, not the last one's own failures
                pending = sorted(k for k in self.failures if k < self.attempt)
            for k in pending:
                self._name_root_held(k)

    def close(self) -> None:
        self._name_roots()
        for s in [self.sock] + self.conns:
            try:
                s.close()
            except OSError:
                pass


class Client:
    """An adapter's end. ``deliver(event)`` puts ``("restart", K)`` / ``("finish", K)`` where
    the adapter waits (its current supervisor's queue, or the queue between attempts)."""

    def __init__(self, rank: int, deliver: Deliver, coordinator: Optional[Coordinator] = None, addr: str = "",
                 port: int = 0):
        self.rank, self.deliver = rank, deliver
        self.lock = threading.Lock()
        self.latest: Optional[Tuple[int, int]] = None   # (K, PORT) of the newest restart heard
        self.held: Set[int] = set()     # the attempts whose PORT rank 0's store holder serves
        self.finished = -1
        self.ended = -1     # an attempt whose failure is not restarted in place (end K)
        self.coordinator = coordinator
        self.sock: Optional[socket.socket] = None
        self.connected = threading.Event()
        self.closed = False
        if coordinator is not None:
            coordinator.local = self
            self.connected.set()
        else:
            threading.Thread(target=self._connect, args=(addr, port), name="inplace",
                             daemon=True).start()

    def _connect(self, addr: str, port: int) -> None:
        end = time.monotonic() + 600.0     # rank 0's adapter may start later than this one
        while not self.closed and time.monotonic() < end:
            try:
                sock = socket.create_connection((addr, port), timeout=2.0)
            except OSError:
                time.sleep(0.05)
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock = sock
            self.connected.set()
            _lines(sock, self._heard)
            return

    def _heard(self, head: str, rest: str) -> None:
        words = rest.split()
        try:
            if head == "restart":
                self.restart(int(words[0]), int(words[1]), words[2:3] == ["held"])
            elif head == "finish":
                self.finish(int(words[0]))
            elif head == "end":
                self.end(int(words[0]))
        except (IndexError, ValueError):
            pass

    def restart(self, k: int, port: int, held: bool = False) -> None:
        with self.lock:
            if self.latest is not None and self.latest[0] >= k:
                return
            if held:        # before latest: a rank that goes on by latest sees it
                self.held.add(k)
            self.latest = (k, port)
        self.deliver(("restart", k))

    def finish(self, k: int) -> None:
        self.finished = max(self.finished, k)
        self.deliver(("finish", k))

    def end(self, k: int) -> None:
        self.ended = max(self.ended, k)
        self.deliver(("end", k))

    def _say(self, text: str, wait: float) -> bool:
        if not self.connected.wait(wait):
            return False
        if self.coordinator is not None:
            head, _, rest = text.rstrip("\n").partition(" ")   # "fail K INFO", "done K RANK"
            self.coordinator.message(head, rest)
            return True
        sock = self.sock
        if sock is None:
            return False
        try:
            sock.sendall(text.encode())
            return True
        except OSError:
            return False

    def fail(self, k: int, info: dict) -> bool:
        return self._say(f"fail {k} {json.dumps(info, separators=(',', ':'))}\n", CONNECT_WAIT)

    def done(self, k: int) -> bool:
        return self._say(f"done {k} {self.rank}\n", CONNECT_WAIT)

    def close(self) -> None:
        self.closed = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
