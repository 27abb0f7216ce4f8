"""In-place restarts: rank 0's store holder, the next attempt's rendezvous store up before any
rank's worker wants it (rank/inplace/loop.py says when it runs).

**Why.** torch's env:// rendezvous makes rank 0's worker the TCPStore server and every other
rank a client. A client that comes first is refused and retries with c10d's back-off (half
a second at first, x1.5, +-50 %): measured 0.1-1.2 s lost per restart whenever rank 0's
worker is the last to its own store, which is the rule after a restart onto fresh workers
(no spare, or rank 0's was not ready in time), since every rank imports torch first.
torchrun never pays it: its agent holds the store before the workers start and sets
``TORCHELASTIC_USE_AGENT_STORE=True``, so every worker, rank 0's too, is a client of a server
already up.

**What.** Rank 0's adapter starts one process for the job's life, ``PYTHON spare.py --hold
FD`` (the worker's interpreter; it imports ``torch.distributed`` at SCHED_IDLE, at normal
priority from :data:`IDLE_FOR` s on, then waits blocked on FD, using no CPU). When the coordinator decides a restart it asks
the holder for a TCPStore server on the new attempt's port (``{"hold": PORT, ...}``) and waits
for its ``held PORT`` (:data:`HOLD_WAIT` at most, a few ms when it is up) before it sends the
restart word; the word then says ``held``, and every rank puts
``TORCHELASTIC_USE_AGENT_STORE=True`` into its next worker's environment (loop.py ``next``).
torch then makes every worker a plain client (torch/distributed/rendezvous.py
``_create_c10d_store``: "We create a new TCPStore for every retry", no key prefix): the new
port per attempt keeps the attempts' keys apart, as torchrun's new store per retry does.

**Why it is sound.**

* The flag is agreed per attempt, by the one word every rank gets: a worker is a client only
  of a server that said it listens. A client-only job with no server would hang until the
  store's timeout (30 min), so no rank decides it alone.
* Not ready (still importing), dead, failed or slow: the word goes without ``held`` and the
  restart is as without a holder (rank 0's worker makes its store). A holder that was asked and
  did not answer in time is killed and never asked again, and the coordinator gives the attempt
  another port: a late bind of the asked one can never take rank 0's worker's port.
* It holds no device (``CUDA_VISIBLE_DEVICES`` empty; it leaves if an import initialised one
  anyway), no file (stdin/stdout/stderr on /dev/null, only its socket to the adapter), no port
  but the stores it was asked for (the last two attempts'; an older one is closed, its
  workers are gone). It runs nothing of the user's: it imports ``torch.distributed`` only.
* It ends with the job on every path: EOF on its socket (the adapter closes it at the end,
  :meth:`Holder.close`), the adapter's death (PDEATHSIG from the thread that waits for it),
  and every attempt's supervisor keeps it out of its leftovers (``keep``).
* It outlives the budget's last attempt on purpose: that attempt's workers may be its clients.

**Cost.** Only an in-place job with a restart left, whose script imports torch, calls
``init_process_group`` through env:// and makes no store server of its own (prestart.py
``rendezvous_ok``), on rank 0's host: one idle interpreter with torch (~300 MB RSS). Not a
torch job, or ``--max_restarts 0``: nothing is started. ``MPILAUNCH_STORE_HOLD=0`` turns it off.

The first launch does not use it: its flag would have to be set before the workers start, so
the holder would have to import torch before them (the launch's own time). Rank 0's first
worker serves its own store early instead, on a port its adapter bound before starting it
(adopt.py ``first_store``), as does a restart's fresh rank 0 worker when the holder is not up.
"""
from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Any, List, Optional, Sequence

    from mpilaunch.rank.inplace.coordinate import Coordinator
    from mpilaunch.rank.plan import ChildSpec
    from mpilaunch.rank.supervisor import Supervisor

from mpilaunch.rank import status
from mpilaunch.rank.inplace.prestart import (SPARE, fork_after, hang_up, leave_idle, preload_for,
                                             rendezvous_ok, spare_eligible)

HOLD_VAR = "MPILAUNCH_STORE_HOLD"                 # "0": no holder
AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"  # torch: every rank a client of the store
# s the coordinator waits for the holder's ``held PORT`` before the restart word goes without
# it: a blocked holder at normal priority answers in a few ms; a restart's teardown takes longer
HOLD_WAIT = 0.5
DEBUG_VAR = "MPILAUNCH_DEBUG_SPARE"    # rank 0's adapter says whether each restart was held
# s the holder imports at SCHED_IDLE (the CPU the first attempt leaves idle) before it is moved
# to normal priority: on a machine the job keeps busy an idle-priority import may never end,
# and a restart onto fresh workers (no spare) is the holder's case; ~1.5 s of one
# CPU, once per job, after the first attempt's own start-up
IDLE_FOR = 10.0


def holds(spec: ChildSpec, argv: Sequence[str], opts: Any) -> bool:
    """A store holder for this job (rank 0's worker ``spec``, the job's ``argv``)."""
    env = spec.env
    return (env.get("RANK") == "0" and env.get(HOLD_VAR) != "0" and AGENT_STORE_VAR not in env
            and spare_eligible(spec, argv, opts)
            and "torch" in preload_for(spec.argv, {}).split(",")
            and rendezvous_ok(spec.argv))


def start_holder(sup: Supervisor, argv: Sequence[str], opts: Any,
                 coord: Coordinator) -> Optional[Holder]:
    """Rank 0's holder for the job (``sup``: its first attempt's supervisor), asked by
    ``coord`` at each restart from now on; None if the job gets none (:func:`holds`)."""
    spec = getattr(sup, "worker_spec", None)
    worker = sup.children.get("worker")
    if spec is None or worker is None or not holds(spec, argv, opts):
        return None
    holder = Holder(sup, spec, worker)
    coord.hold = holder.hold
    return holder


def agent_store(specs: List[ChildSpec], held: bool, restarts: Any,
                holder: Optional[Holder]) -> List[ChildSpec]:
    """The next attempt's children (``restarts.k``); if the restart word said its store is
    ``held``, the worker a client of it, as under torchrun's agent (``store-held`` in the event
    record; rank 0's names the holder's pid)."""
    if not held:
        return specs
    status.life(restarts.rank, restarts.host, "worker", "store-held", code=restarts.k,
                pid=holder.pid if holder is not None else None)
    return [s._replace(env=dict(s.env, **{AGENT_STORE_VAR: "True"})) if s.role == "worker"
            else s for s in specs]


def attach(holder: Optional[Holder], sup: Supervisor) -> None:
    """``sup`` runs the next attempt: it keeps the holder (if any) out of its leftovers too."""
    if holder is not None:
        holder.attach(sup)


class Holder:
    """The holder process and the adapter's end of its socket. Its thread forks it and waits
    for it (PDEATHSIG is the forking thread's: it dies with the adapter)."""

    def __init__(self, sup: Supervisor, spec: ChildSpec, worker_child: Any) -> None:
        self.spec = spec
        self.world = int(spec.env.get("WORLD_SIZE", "1"))
        self.libuv = spec.env.get("USE_LIBUV", "1") != "0"
        self.proc: Optional[subprocess.Popen] = None
        self.exited = threading.Event()
        self.lock = threading.Lock()
        self.sup = sup          # the supervisor whose ``keep`` has it (attach)
        self.buf = b""
        self.up = False         # its '+': torch.distributed imported, it can listen
        self.dead = False       # gone, or given up: never asked again
        self.why = ""           # why the last hold() was not held (a debug line)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        from mpilaunch.pdeathsig import SignalsBlocked

        t = threading.Thread(target=self._run, args=(theirs, worker_child), name="store-holder",
                             daemon=True)
        with SignalsBlocked():
            t.start()

    def _run(self, theirs: socket.socket, worker_child: Any) -> None:
        import subprocess

        sup = self.sup
        self.proc = fork_after(sup, worker_child, [self.spec.argv[0], SPARE, "--hold"], theirs,
                               dict(self.spec.env, CUDA_VISIBLE_DEVICES=""), lambda: self.dead)
        if self.proc is None:    # closed before it was started, or it could not start
            self.dead = True
            self.exited.set()
            return
        now = self.sup      # attach()ed meanwhile: that supervisor keeps it too
        if now is not sup:
            with now.lock:
                now.keep.add(self.proc.pid)
        try:
            self.proc.wait(IDLE_FOR)
        except subprocess.TimeoutExpired:
            leave_idle(self.proc.pid)    # still importing, or done (then a no-op)
            self.proc.wait()
        self.dead = True
        self.exited.set()

    def attach(self, sup: Supervisor) -> None:
        """``sup`` runs the next attempt: it keeps the holder out of its leftovers too."""
        with sup.lock:
            self.sup = sup
            if self.proc is not None:
                sup.keep.add(self.proc.pid)

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def _read(self, timeout: float) -> bool:
        """More of its words into :attr:`buf`; False at EOF or an error."""
        try:
            if not select.select([self.sock], [], [], max(timeout, 0.0))[0]:
                return True
            data = self.sock.recv(4096)
        except (OSError, ValueError):
            return False
        self.buf += data
        return bool(data)

    def ready(self) -> bool:
        """It is up (torch.distributed imported) and alive."""
        if self.dead:
            return False
        if not self.up:
            if not self._read(0.0):
                self.give_up("it exited before it was ready")
                return False
            if self.buf.startswith(b"+"):
                self.up, self.buf = True, self.buf[1:]
        return self.up

    def hold(self, k: int, port: int) -> bool:
        """Have it listen on ``port`` (attempt ``k``'s store): True once it says it does. Not
        ready: False, it was not asked. Asked and no ``held`` within HOLD_WAIT: it is killed
        (never asked again) and False: the caller must not give ``port`` to rank 0's worker.
        The coordinator's ask, under its lock, before the restart word."""
        t0 = time.monotonic()
        held = self._hold(k, port)
        if self.spec.env.get(DEBUG_VAR):    # what the restart word waited for it
            status.write_stderr(f"mpilaunch.rank: rank 0: attempt {k}'s store "
                                + (f"held by pid {self.pid} on port {port}" if held else
                                   f"not held: {self.why}")
                                + f" ({time.monotonic() - t0:.3f} s)\n")
        return held

    def _hold(self, k: int, port: int) -> bool:
        with self.lock:
            if not self.ready():
                self.why = self.why or ("the holder is gone" if self.dead
                                        else "the holder is not ready")
                return False
            msg = {"hold": port, "world": self.world, "libuv": self.libuv, "attempt": k}
            try:
                self.sock.sendall(json.dumps(msg).encode() + b"\n")
            except OSError:
                self.give_up("it is gone")
                return False
            end = time.monotonic() + HOLD_WAIT
            while b"\n" not in self.buf:
                left = end - time.monotonic()
                if left <= 0:
                    self.give_up(f"no answer within {HOLD_WAIT} s")
                    return False
                if not self._read(left):
                    self.give_up("it exited")
                    return False
            line, self.buf = self.buf.split(b"\n", 1)
            if line.decode(errors="replace") != f"held {port}":
                self.give_up(f"it answered {line.decode(errors='replace')!r}")
                return False
            self.why = ""
            return True

    def give_up(self, why: str) -> None:
        """Never asked again; the process killed (a slow one must not serve a later store)."""
        self.why, self.dead = why, True
        if self.proc is not None:
            try:
                self.proc.kill()
            except OSError:
                pass

    def close(self) -> None:
        """The job's end: it is killed (its stores with it) and waited for."""
        self.dead = True
        hang_up(self.sock)
        if self.proc is not None:   # nothing of it to flush: every attempt's workers are gone
            try:
                self.proc.kill()
            except OSError:
                pass
            self.exited.wait(2.0)
