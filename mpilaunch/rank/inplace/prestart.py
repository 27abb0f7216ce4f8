"""In-place restarts: the next attempt's worker interpreter, started before it is needed
(rank/inplace/loop.py says when; rank/inplace/spare.py is what it runs)."""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from typing import Callable, Iterable, List, Mapping, Optional, Protocol, Sequence

    from mpilaunch.rank.options import Options
    from mpilaunch.rank.plan import ChildSpec
    from mpilaunch.rank.spawn import Child
    from mpilaunch.rank.supervisor import Supervisor

    class _Child(Protocol):
        """What of a supervisor's child (its ``children``) the spare reads."""
        @property
        def spec(self) -> ChildSpec: ...
        @property
        def proc(self) -> Optional[Child | subprocess.Popen[bytes]]: ...
        @property
        def status(self) -> Optional[int]: ...

from mpilaunch.pdeathsig import SignalsBlocked

PRELOAD_VAR = "MPILAUNCH_SPARE_PRELOAD"
HEAVY = ("torch", "mindspore", "tensorflow", "jax", "numpy")

SPARE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "spare.py")


def preload_for(argv: Sequence[str], env: Mapping[str, str]) -> str:
    """The modules a spare imports: ``MPILAUNCH_SPARE_PRELOAD``, else the heavy ones the
    script's own ``import`` lines name; '' = no spare."""
    if PRELOAD_VAR in env:
        return ",".join(m.strip() for m in env[PRELOAD_VAR].split(",") if m.strip())
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except (OSError, IndexError):
        return ""
    found = set(re.findall(r"^\s*(?:import|from)\s+([A-Za-z_]\w*)", text, re.M))
    return ",".join(m for m in HEAVY if m in found)


def listens(argv: Sequence[str], env: Mapping[str, str], modules: str) -> bool:
    """Rank 0's spare may start the attempt's rendezvous store before its script runs
    (spare.py ``_listen``): a torch script whose ``init_process_group`` makes the env:// store
    (multi-tenant: it then shares the spare's), and that makes no TCPStore server of its own
    (a second server on the port would fail to bind; a client, ``is_master=False``, is fine)
    nor names an ``init_method``."""
    if env.get("RANK") != "0" or "torch" not in modules.split(","):
        return False
    return rendezvous_ok(argv)


def rendezvous_ok(argv: Sequence[str]) -> bool:
    """The script (``argv[1]``) calls ``init_process_group`` through env://, and makes no
    TCPStore server of its own nor names an ``init_method``: its rank 0 store may be made by
    another process (:func:`listens`, rank/inplace/hold.py)."""
    try:
        with open(argv[1], encoding="utf-8", errors="replace") as fh:
            text = fh.read(1 << 20)
    except (OSError, IndexError):
        return False
    servers = [m for m in re.finditer(r"TCPStore\s*\(", text)
               if not re.search(r"is_master\s*=\s*False", text[m.end():m.end() + 300])]
    return ("init_process_group" in text and not servers
            and not re.search(r"init_method\s*=", text))


class Spare:
    """One pre-started interpreter. Its thread waits until the attempt's own worker is started
    (the worker first: the spare's imports then compete with its start as little as they
    can), forks the spare (:func:`fork_after`) and waits for it: PDEATHSIG is the forking
    thread's (supervisor.py), so the spare dies with the adapter. Its pid is in the
    supervisors' ``keep`` (the subtree they end on their way out) until one adopts it."""

    def __init__(self, sup: Supervisor, worker_child: _Child, modules: str,
                 spec: Optional[ChildSpec] = None) -> None:
        self.spec = worker_child.spec if spec is None else spec
        self.store = listens(self.spec.argv, self.spec.env, modules)
        self.proc: Optional[subprocess.Popen] = None
        self.exited = threading.Event()
        self.returncode: Optional[int] = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        # go(), listen() and prime() write from different threads: one message at a time
        self.send_lock = threading.Lock()
        self.adopted = False     # go() handed it the attempt: self.sock is the worker's now
        self.imported = False
        self.acks = 0            # '+' read from it: one for its modules, one per prime()
        self.pending = b""       # a listen() line to send once prime() lets go of the socket
        self.pending_port: Optional[socket.socket] = None   # and the port it hands over
        self.primes = 0          # prime() messages sent
        self.recv_lock = threading.Lock()
        self.why = ""            # how a wait for it ended without it (state(): a debug line)
        self.thread = threading.Thread(target=self._run, args=(sup, worker_child, theirs, modules),
                                       name="spare", daemon=True)
        with SignalsBlocked():
            self.thread.start()

    def _run(self, sup: Supervisor, worker_child: _Child, theirs: socket.socket, modules: str) -> None:
        spec = self.spec
        self.proc = fork_after(sup, worker_child, [spec.argv[0], SPARE, modules], theirs, spec.env,
                               self.exited.is_set, spec.inherit_stdin, spec.pass_fds or (), spec.cpus)
        if self.proc is not None:
            self.returncode = self.proc.wait()
        self.exited.set()

    def usable(self) -> bool:
        return self.proc is not None and not self.exited.is_set()

    def wake(self) -> None:
        """It is wanted now: every thread of it back to normal priority at once, so that an
        import still under way (a restart soon after the start) finishes at full speed instead
        of on the CPU others leave idle; spare.py does the same once it has the message, for
        threads started since."""
        proc = self.proc
        if proc is not None and not self.exited.is_set():
            leave_idle(proc.pid)

    def listen(self, port: int) -> None:
        """The next attempt rendezvouses on ``port``: rank 0's spare starts its store now,
        while the adapters still stop the last attempt's workers. The port listens from now
        (storeport.py; handed over with the line): a worker that reaches it before the spare
        has torch waits in its backlog, not refused and backing off (hold.py: the cost)."""
        if not self.store or not self.usable():
            return
        env = self.spec.env
        from mpilaunch.rank.inplace.storeport import store_port

        bound = store_port(port)
        msg = {"listen": port, "world": int(env.get("WORLD_SIZE", "1")),
               "libuv": env.get("USE_LIBUV", "1") != "0", "fd": bound is not None}
        line = json.dumps(msg).encode() + b"\n"
        # never waits: a prime() under way blocks until the spare reads it (it may still be
        # importing), and the restart is not held for an early store; the line then goes
        # right after that prime's, or before go()'s
        if not self.send_lock.acquire(blocking=False):
            self.pending, self.pending_port = line, bound
            return
        try:
            self._send_listen(line, bound)
        finally:
            self.send_lock.release()

    def _send_listen(self, line: bytes, bound: Optional[socket.socket]) -> None:
        """The line, with the bound port; ours closed either way (the spare's copy goes with it)."""
        try:
            if bound is None:
                self.sock.sendall(line)
            else:
                socket.send_fds(self.sock, [line], [bound.fileno()])
        except OSError:
            pass
        finally:
            if bound is not None:
                bound.close()

    def _send_pending(self) -> None:
        """listen()'s line, if it came while prime() held the socket (send_lock held)."""
        line, bound, self.pending, self.pending_port = self.pending, self.pending_port, b"", None
        if line:
            self._send_listen(line, bound)

    def prime(self, names: Iterable[str]) -> bool:
        """Have it import ``names`` too (modules the worker imported: loop.py ``Learner``);
        blocks until it reads them. False: it is gone or already the worker."""
        with self.send_lock:
            if self.adopted or not self.usable():
                return False
            try:
                self.sock.sendall(json.dumps({"import": list(names)}).encode() + b"\n")
                self.primes += 1
                self._send_pending()
            except OSError:
                return False
        return True

    def _read_acks(self) -> None:
        with self.recv_lock:
            if self.adopted or not self.usable():
                return
            try:
                self.acks += self.sock.recv(64, socket.MSG_DONTWAIT).count(b"+")
            except OSError:
                pass

    def caught_up(self) -> bool:
        """It has imported everything it was given (its modules, and every prime())."""
        self._read_acks()
        return self.acks >= 1 + self.primes

    def go(self, spec: ChildSpec, out_fd: int, err_fd: Optional[int] = None) -> bool:
        """Hand attempt's ``spec`` (env, argv, log) to the spare, its stdout on ``out_fd`` and
        its stderr on ``err_fd`` (None: ``out_fd`` too): False if it cannot take it."""
        msg = json.dumps({"env": spec.env, "argv": spec.argv[1:]}).encode() + b"\n"
        fds = [out_fd] if err_fd is None else [out_fd, err_fd]
        with self.send_lock:
            try:
                self._send_pending()
                socket.send_fds(self.sock, [msg], fds)
            except OSError:
                self.sock.close()
                return False
            self.adopted = True     # the socket stays: the worker answers Learner on it
        return True

    def ready(self) -> bool:
        """Its imports are done (spare.py says so with one byte)."""
        if not self.imported:
            self._read_acks()
            self.imported = self.acks >= 1
        return self.imported

    def state(self, wait: float, stopping: Callable[[], bool]) -> str:
        """Whether it becomes the worker: ``ready``, ``waited for`` (still importing, and it got
        ready within ``wait`` s), else ``not ready in time`` (:attr:`why` says how the wait
        ended). A spare still importing is waited for however busy the machine: woken (at
        normal priority now) it is ahead of a fresh interpreter by what it imported, and
        competes for the CPUs as that one would (measured quiet and at load 8: bench/README.md,
        "Restart", the early kill)."""
        if self.ready():
            return "ready"
        t0 = time.monotonic()
        if self.wait_ready(wait, stopping):
            return "waited for"
        end = (f"it exited (status {self.returncode})" if not self.usable()
               else "the rank is stopping" if stopping() else "the wait ran out")
        self.why = (f"the spare's wait ended after {time.monotonic() - t0:.2f} s: {end} "
                    f"({self.acks} of {1 + self.primes} imports acknowledged)")
        return "not ready in time"

    def wait_ready(self, timeout: float, stopping: Callable[[], bool]) -> bool:
        """Wait until its imports are done, up to ``timeout`` s; False when it died, the wait
        ran out, or ``stopping()`` (the rank is being torn down)."""
        import select

        end = time.monotonic() + timeout
        while not self.ready():
            left = end - time.monotonic()
            if left <= 0 or not self.usable() or stopping():
                return False
            try:
                select.select([self.sock], [], [], min(left, 0.1))
            except (OSError, ValueError):
                return False
        return True

    def discard(self, at_once: bool = False) -> None:
        """Gone: told by EOF (``at_once``: killed, it is still importing)."""
        if self.proc is None:
            self.exited.set()      # not forked yet: it never will be
        hang_up(self.sock)    # the spare reads EOF and leaves; a prime() blocked in sendall returns
        bound, self.pending_port = self.pending_port, None
        if bound is not None:    # a listen never sent: the port is free for a fresh worker
            bound.close()
        if self.proc is not None and not self.exited.wait(0.0 if at_once else 1.0):
            try:
                self.proc.kill()
            except OSError:
                pass
            self.exited.wait(2.0)


def fork_after(sup: Supervisor, worker_child: _Child, argv: List[str], theirs: socket.socket,
               env: Mapping[str, str], cancelled: Callable[[], bool], inherit_stdin: bool = False,
               pass_fds: Sequence[int] = (), cpus: Optional[List[int]] = None
               ) -> Optional[subprocess.Popen[bytes]]:
    """A spare or the store holder (``argv`` + ``theirs``, its end of the socket, closed here) at
    SCHED_IDLE once the worker started (30 s at most), kept by ``sup``; None: cancelled()/failed."""
    import subprocess
    end = time.monotonic() + 30.0
    while (worker_child.proc is None and worker_child.status is None
           and time.monotonic() < end and not cancelled()):
        time.sleep(0.01)
    try:
        with sup.lock:
            if cancelled():
                return None
            proc = subprocess.Popen(argv + [str(theirs.fileno())], env=env, close_fds=True,
                                    stdin=None if inherit_stdin else subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    pass_fds=tuple(pass_fds) + (theirs.fileno(),),
                                    preexec_fn=at_idle(sup.child_preexec(cpus)))
            sup.keep.add(proc.pid)
            return proc
    except OSError:
        return None
    finally:
        theirs.close()


def hang_up(sock: socket.socket) -> None:
    """Our end of a pre-started interpreter's socket shut and closed: it reads EOF (spares and
    the store holder leave on it), and nothing of ours blocks on it any more."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def leave_idle(pid: int) -> None:
    """Every thread of process ``pid`` at SCHED_IDLE back to normal priority."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            if os.sched_getscheduler(int(tid)) == os.SCHED_IDLE:
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
        except (OSError, ValueError, AttributeError):
            pass


def run_argv(argv: Sequence[str], fd: int) -> List[str]:
    """``PYTHON SCRIPT ARGS...`` as a worker that answers the adapter's question on ``fd``
    (spare.py ``--run``: what it imported, for the next attempt's spare)."""
    return [argv[0], SPARE, "--run", str(fd)] + list(argv[1:])


def spare_eligible(spec: ChildSpec, argv: Sequence[str], opts: Options) -> bool:
    return (spec.role in ("worker", "scheduler") and not opts.no_python and not opts.module
            and list(spec.argv) == list(argv) and len(argv) >= 2)


def spare_modules(spec: ChildSpec, argv: Sequence[str], opts: Options) -> str:
    """The modules a spare for ``spec``'s role starts with; '' = it gets none."""
    if not spare_eligible(spec, argv, opts):
        return ""
    return preload_for(spec.argv, spec.env)


def start_spare(sup: Supervisor, spec: ChildSpec, argv: Sequence[str], opts: Options) -> Optional[Spare]:
    """The next attempt's spare for ``spec``'s role (as planned; the scheduler's too), or None."""
    modules = spare_modules(spec, argv, opts)
    if not modules:
        return None
    return Spare(sup, sup.children["worker"], modules, spec=spec)


CAP_SYS_NICE = 23


def has_cap_sys_nice(status_text: str) -> bool:
    """CAP_SYS_NICE in the effective set of a ``/proc/PID/status`` text. Not uid 0: root in a
    container is often without it (Docker's default set), and a spare started at SCHED_IDLE
    there could never be woken: it would import on idle CPU only, however long the wait."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return bool(int(line.split()[1], 16) >> CAP_SYS_NICE & 1)
            except (IndexError, ValueError):
                return False
    return False


def _can_leave_idle() -> bool:
    """A SCHED_IDLE process may go back to SCHED_OTHER at nice 0 only with CAP_SYS_NICE or an
    RLIMIT_NICE of 20 (the kernel's can_nice): else the spare is started at normal priority."""
    import resource

    try:
        if resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20:
            return True
        with open("/proc/self/status") as fh:
            return has_cap_sys_nice(fh.read())
    except (OSError, ValueError, AttributeError):
        return False


def at_idle(hook: Callable[[], None]) -> Callable[[], None]:
    """The spare imports at SCHED_IDLE where it may leave it (rank/inplace/spare.py does on the
    restart): it then takes only CPU the running attempt leaves idle. Measured on 2 cores
    without it: a fresh launch's first step 1.8 s later (2 workers and 2 spares importing
    torch at once)."""
    if not _can_leave_idle():
        return hook

    def both() -> None:
        hook()
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        except (OSError, AttributeError):
            pass
    return both
