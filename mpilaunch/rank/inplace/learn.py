"""What the worker imported, for the next attempt's spare (in-place restarts).

A spare that imported only the heavy modules its script's ``import`` lines name leaves the
restarted worker everything those modules import at first use: a DDP model's constructor
imports ~830 more modules (``torch._dynamo``, ``sympy``: 1.1-1.3 s on this machine, about what
``import torch`` costs), and a real script's own libraries more (``import lightning`` after
torch: 3.0-3.6 s on this busy 2-core machine). So the adapter asks its worker, which answers
over a socket its own interpreter keeps (rank/inplace/spare.py says why that is sound and what
is never imported), and hands the names to the next attempt's spare, every second for the
worker's first 10 s, then at 20, 40, 80, ... s (the gap up to ``MAX_INTERVAL`` s): a script's
imports are mostly in its first seconds, and a late one (an evaluation's, a checkpoint's) is
still learnt.
What earlier attempts' workers taught is kept (:class:`Known`): each new spare gets all of it
at once, so a restart soon after a restart finds it too.
"""
from __future__ import annotations

import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any, Callable, Iterable, List, Optional

from mpilaunch.rank import status
from mpilaunch.pdeathsig import SignalsBlocked

# "0" in the workers' environment: the spare imports only its preload list, the worker is
# never asked what it imported, and starts as ``PYTHON SCRIPT``
LEARN_VAR = "MPILAUNCH_SPARE_LEARN"
# the lifecycle line each rank sends at a restart, by what became of its spare (loop.py;
# the launcher's attempts/phases.py reads them)
SPARE_LIFE = {"ready": "spare-ready", "waited for": "spare-waited",
              "not ready in time": "spare-late"}
# asked every EARLY_INTERVAL s for the first EARLY_ASKS questions (a failure soon after the
# start finds the model's imports learnt: DDP's come ~1 s after torch's), then at doubling
# intervals up to MAX_INTERVAL s
EARLY_INTERVAL = 1.0
EARLY_ASKS = 10
MAX_INTERVAL = 300.0
ANSWER_TIMEOUT = 30.0    # a worker holding the GIL that long is not asked again this attempt
MAX_ANSWER = 4 << 20


class Known:
    """The modules workers of this rank said they imported, in the order first said."""

    def __init__(self) -> None:
        self.names: List[str] = []
        self.seen: set = set()

    def add(self, names: Iterable[str]) -> List[str]:
        new = [n for n in names if n and n not in self.seen]
        self.seen.update(new)
        self.names += new
        return new


def ask(sock: socket.socket, timeout: float = ANSWER_TIMEOUT) -> Optional[List[str]]:
    """One question on the worker's socket: the names it has not said yet; None when it
    cannot answer (gone, or too slow: the conversation is then out of step)."""
    try:
        sock.settimeout(timeout)
        sock.sendall(b"?")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = sock.recv(1 << 16)
            if not chunk or len(buf) > MAX_ANSWER:
                return None
            buf += chunk
    except OSError:
        return None
    return [n for n in buf[:-1].decode("utf-8", "replace").split(",") if n]


class Learner:
    """One attempt's: asks the worker ``channel()`` (None until it is started) and primes
    ``spare()`` (the next attempt's, or None) with what it learns."""

    def __init__(self, known: Known, channel: Callable, spare: Callable, debug: str = "") -> None:
        self.known, self.channel, self.spare, self.debug = known, channel, spare, debug
        self.done = threading.Event()
        self.primed: Any = None      # the spare that has every name in known
        self.thread = threading.Thread(target=self._run, name="learn", daemon=True)
        with SignalsBlocked():
            self.thread.start()

    def stop(self) -> None:
        self.done.set()

    def _prime(self, new: List[str]) -> None:
        spare = self.spare()
        if spare is None:
            return
        if spare is not self.primed:
            if self.known.names and not spare.prime(self.known.names):
                return
            self.primed = spare
        elif new:
            spare.prime(new)

    def _say(self, new: int, asked: float) -> None:
        """Once the spare has imported it all: how many modules were new, and when the worker
        was asked (its imports up to then are in the spare)."""
        spare = self.spare()
        while spare is not None and spare.usable() and not spare.caught_up():
            if self.done.wait(0.1):
                return
        if spare is not None and spare.usable():
            status.write_stderr(f"mpilaunch.rank: {self.debug}: spare primed: +{new} modules "
                                f"({len(self.known.names)} in all), asked at {asked:.3f}\n")

    def _run(self) -> None:
        self._prime([])            # what earlier attempts' workers imported, at once
        start = time.monotonic()
        asks, at = 0, EARLY_INTERVAL
        while not self.done.wait(max(0.0, start + at - time.monotonic())):
            sock = self.channel()
            if sock is None:       # not started yet (or not through spare.py)
                at += 0.1
                continue
            asked = time.time()
            names = ask(sock)
            if names is None or self.done.is_set():
                return
            new = self.known.add(names)
            self._prime(new)
            if self.debug:        # tests and bench/: what the spare was given, and when asked
                self._say(len(new), asked)
            asks += 1
            at += EARLY_INTERVAL if asks < EARLY_ASKS else min(at, MAX_INTERVAL)
