"""Start and watch this rank's children: the worker, and on rank 0 the scheduler.

* One thread per child forks it, waits on it and lives as long as it: the kernel fires the
  children's ``PR_SET_PDEATHSIG(SIGKILL)`` (pre-exec hook) when the *forking thread* exits.
  Children stay in the rank's process group, which Open MPI's teardown signals.
* Events (child exits, signals) arrive on one ``queue.SimpleQueue`` the main thread blocks on;
  helper threads block SIGTERM/SIGINT/SIGHUP, so those interrupt the main thread's ``get``.
  Nothing polls.
* Output: a non-tailed child writes straight to its log file (zero copy). A tailed worker
  writes to a pipe (1 MiB); a relay thread copies large chunks to the log and whole lines,
  each prefixed ``[rank<R>] ``, to the adapter's stdout (a partial line is shown after
  0.1 s of silence, so prompts such as pdb's appear). Like msrun's file logs, and unlike
  plain mpirun (which gives ranks a pty), the worker's stdout is therefore not a terminal
  and Python block-buffers ``print``; set ``PYTHONUNBUFFERED=1`` for live prints. A pty was
  measured and rejected: 200 MB of lines took 2-3x as long as through a pipe.
* A child failing (non-zero status or signal) -> status line ``cause: self``, the other
  child is terminated (SIGTERM, SIGKILL after ``kill_grace`` s), exit with the child's status
  (128+N for signal N). SIGTERM/SIGINT/SIGHUP to the adapter -> the same teardown, status lines
  ``cause: terminated``, exit 128+N. Rank 0's worker exiting 0 -> the scheduler is stopped
  quietly once every rank's worker exited 0 (``rank/jobdone.py``), else when it has not left
  by itself within ``scheduler_grace`` s (``event: grace-expired``); status 0 either way.
* Descendants: the adapter is a child subreaper, so whatever a child starts
  (DataLoader workers, a shell, a setsid daemon) is re-parented to the adapter, not to init
  (process groups: setsid escapes them, and children must stay in the rank's group for Open
  MPI's teardown; cgroups: not available to a rank). On every way out of :meth:`Supervisor.run`
  the whole subtree is ended: orphans get SIGTERM with the children, everything left SIGKILL
  after the grace (``DESCENDANT_GRACE`` s after a success), and every orphan is reaped (also
  during the run, on ``SIGCHLD``). Not covered: the adapter itself SIGKILLed (its children die
  by PDEATHSIG; their descendants are left to Open MPI's process-group kill).
"""
from __future__ import annotations

import errno
import os
import _signal as signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)
import _queue as queue   # SimpleQueue and Empty, without queue.py and heapq
import threading
import time
TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from subprocess import Popen
    from typing import Any, Callable, Dict, List, Optional, Sequence, Set

    from mpilaunch.rank.plan import ChildSpec   # what to start: rank/plan.py decides it

from mpilaunch.contract import ADAPTER_KILL_GRACE, SCHEDULER_GRACE
from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, SignalsBlocked, prctl as _prctl
from mpilaunch.rank import descendants, firstout, jobdone, logs, spawn, status
from mpilaunch.rank.relay import PIPE_SIZE, grow_pipe, relay_threads

TEARDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# A child killed by SIGTERM is usually Open MPI's teardown signalling the whole process group;
# our own copy of the signal can arrive later than the child's exit (seen >0.3 s on 4.1).
TEARDOWN_SIGNAL_WINDOW = 1.5
PR_SET_CHILD_SUBREAPER = 36
DESCENDANT_GRACE = 1.0   # s between SIGTERM and SIGKILL for what a finished job left running
RESTART = -1             # run()'s value after a ("restart", ...) event: no status of a process


def exit_status(returncode: int) -> int:
    """Popen returncode -> shell-style status (128+N for death by signal N)."""
    return 128 - returncode if returncode < 0 else returncode


class Running:
    def __init__(self, spec: ChildSpec) -> None:
        self.spec = spec
        self.thread: Optional[threading.Thread] = None
        self.relay: Optional[threading.Thread] = None
        self.hidden_relay: Optional[threading.Thread] = None   # torchrun's --redirects 1 or 2
        self.proc: Optional[spawn.Child | Popen[bytes]] = None   # Popen: an adopted spare (rank/inplace/)
        self.status: Optional[int] = None          # shell-style, once exited
        self.signal: Optional[int] = None
        self.start_error: Optional[str] = None
        self.reported = False
        self.log_fd: Optional[int] = None
        # ours only to hand over (sockets in spec.pass_fds): closed once the child has its copy
        self.handed: List[Any] = []


class Supervisor:
    def __init__(self, children: Sequence[ChildSpec], rank: int, host: str,
                 scheduler_grace: float = SCHEDULER_GRACE,
                 kill_grace: float = ADAPTER_KILL_GRACE,
                 stdout_fd: int = 1, pipe_size: int = PIPE_SIZE, tell_rank0: bool = True) -> None:
        self.children: Dict[str, Running] = {c.role: Running(c) for c in children}
        self.rank, self.host = rank, host
        self.scheduler_grace, self.kill_grace = scheduler_grace, kill_grace
        self.stdout_fd = stdout_fd
        self.tell_rank0 = tell_rank0    # the job has a scheduler: say "worker done" (jobdone)
        self.pipe_size = pipe_size
        self.events: "queue.SimpleQueue" = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.stopping = False
        self.parent_pid = os.getpid()
        self.signal_grace: Optional[float] = None   # the kill grace after a stop signal, if not kill_grace
        self.stop_signal: Optional[int] = None      # the signal that tore this rank down, once one did
        self.keep: Set[int] = set()     # descendants that outlive this supervisor (rank/inplace/)

    # ------------------------------------------------------------ child threads
    def child_preexec(self, cpus: Optional[List[int]]) -> Callable[[], None]:
        prctl = _prctl()
        parent = self.parent_pid

        def hook() -> None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
            if os.getppid() != parent:      # the adapter died before prctl took effect
                os._exit(137)
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            if cpus:
                os.sched_setaffinity(0, cpus)
        return hook

    def _run_child(self, child: Running) -> None:
        try:
            self._start_and_wait(child)
        except BaseException as exc:     # never leave the main thread waiting for an event
            if child.status is None:
                child.start_error = child.start_error or f"cannot start {child.spec.role}: {exc}"
                child.status = 127
                self.events.put(("exit", child.spec.role))
            raise

    def _start_and_wait(self, child: Running) -> None:
        spec = child.spec
        log_fd = child.log_fd
        # hid_*: torchrun's --redirects 1 or 2, the stream kept off the console (relay.relay_threads)
        read_fd = write_fd = hid_r = hid_w = None
        try:
            if spec.tail_prefix is not None:
                read_fd, write_fd = os.pipe()
                grow_pipe(read_fd, self.pipe_size)
                if spec.hidden:
                    hid_r, hid_w = os.pipe()
            with self.lock:
                if self.stopping:
                    child.start_error = "not started: the rank is being torn down"
                    self.events.put(("exit", spec.role))
                    return
                try:
                    out, err = (write_fd if write_fd is not None else log_fd), None
                    if hid_w is not None:
                        out, err = (hid_w, write_fd) if spec.hidden == 1 else (write_fd, hid_w)
                    child.proc = spawn.start(
                        spec.argv, spec.env, stdin=None if spec.inherit_stdin else spawn.DEVNULL,
                        stdout=out, pass_fds=spec.pass_fds,
                        preexec=self.child_preexec(spec.cpus), stderr=err)
                except OSError as exc:
                    child.start_error = f"cannot start {spec.argv[0]}: {exc.strerror or exc}"
                    child.status = 126 if exc.errno in (errno.EACCES, errno.ENOEXEC) else 127
                    self.events.put(("exit", spec.role))
                    return
        finally:
            for sock in child.handed:
                sock.close()
            if write_fd is not None:
                os.close(write_fd)
            if hid_w is not None:
                os.close(hid_w)
            if hid_r is not None and child.proc is None:
                os.close(hid_r)
                hid_r = None
            if read_fd is None or child.proc is None:
                if log_fd is not None:
                    os.close(log_fd)
                if read_fd is not None:
                    os.close(read_fd)
        # lifecycle lines for the launcher's event record (rank/status.py: life)
        status.life(self.rank, self.host, spec.role, "started", pid=child.proc.pid)
        first = None if spec.role != "worker" else (
            lambda: status.life(self.rank, self.host, "worker", "output"))
        watch = (firstout.watch(spec.log_path, first)   # not tailed: only its log sees it
                 if first is not None and read_fd is None else None)
        if read_fd is not None and log_fd is not None and spec.tail_prefix is not None:
            child.relay, child.hidden_relay = relay_threads(
                spec.role, spec.tail_prefix, read_fd, hid_r, log_fd, self.stdout_fd,
                self.pipe_size, first)
        rc = child.proc.wait()
        if watch is not None:
            watch.stop()
        child.status = exit_status(rc)
        child.signal = -rc if rc < 0 else None
        self.events.put(("exit", spec.role))

    # ------------------------------------------------------------ main thread
    def _on_signal(self, signum: int, frame: object) -> None:  # runs in the main thread; SimpleQueue is reentrant
        self.events.put(("signal", signum))

    def _on_sigchld(self, signum: int, frame: object) -> None:
        self.events.put(("sigchld", None))

    # ------------------------------------------------------------ descendants
    def _own_pids(self) -> Set[int]:
        return {c.proc.pid for c in self.children.values() if c.proc is not None}

    def _orphans(self) -> List[int]:
        """Processes re-parented to the adapter (not the children a thread waits for)."""
        with self.lock:     # a child being started is in _own_pids before anyone looks
            own = self._own_pids() | self.keep
            return [p for p in descendants.children(self.parent_pid) if p not in own]

    def _reap_orphans(self) -> int:
        """Reap every orphan that has exited; the number still running."""
        running = 0
        for p in self._orphans():
            try:
                pid, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:
                continue
            running += pid == 0
        return running

    def _end_descendants(self, grace: float) -> None:
        """SIGTERM to the orphans, SIGKILL to everything left after ``grace``, reap all."""
        if not [p for p in descendants.children(self.parent_pid) if p not in self.keep]:
            return
        descendants.send(self._orphans(), signal.SIGTERM)
        end = time.monotonic() + grace
        while self._reap_orphans() and time.monotonic() < end:
            time.sleep(0.02)
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            rest = [p for p in descendants.subtree(self.parent_pid) if p not in self.keep]
            descendants.send(rest, signal.SIGKILL)
            if not self._reap_orphans() and not rest:
                break
            time.sleep(0.02)

    def run(self) -> int:
        opened = []
        try:    # every log first: one that cannot be created is exit 2 with nothing started
            for child in self.children.values():
                child.log_fd = logs.open_log(child.spec.log_path)
                opened.append(child.log_fd)
        except BaseException:
            for fd in opened:
                os.close(fd)
            raise
        for s in TEARDOWN_SIGNALS:
            signal.signal(s, self._on_signal)
        _prctl()(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        signal.signal(signal.SIGCHLD, self._on_sigchld)
        with SignalsBlocked():
            self.jobdone = jobdone.listener_for(self.rank, self.children, self.events.put)
            for child in self.children.values():
                child.thread = threading.Thread(target=self._run_child, args=(child,),
                                                name=f"child-{child.spec.role}", daemon=True)
                child.thread.start()
        import gc

        gc.enable()   # off while the adapter started (rank/_boot.py); a long job needs it
        try:
            return self._loop()
        finally:
            self._end_descendants(DESCENDANT_GRACE)

    def _running(self) -> List[Running]:
        return [c for c in self.children.values() if c.status is None and c.start_error is None]

    def _loop(self) -> int:
        deadline = None
        while True:
            try:
                if deadline is None:
                    ev = self.events.get()
                else:
                    ev = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                sched = self.children.get("scheduler")
                status.write_stderr(
                    f"mpilaunch.rank: the scheduler did not exit within {self.scheduler_grace:g} s "
                    f"after the worker finished; terminating it\n")
                self._terminate([sched], cause="terminated", event="grace-expired")
                return 0
            if ev[0] == "signal":
                return self._teardown(ev[1])
            if ev[0] == "restart":   # in place (rank/inplace/): every child stops, the rank stays
                self._terminate(list(self.children.values()), cause="terminated")
                return RESTART
            if ev[0] == "sigchld":
                self._reap_orphans()
            elif ev[0] == "peer-done" and jobdone.stop_scheduler_if_all_done(self):
                return 0    # rank 0: the last other rank's worker exited 0
            if ev[0] != "exit":
                continue
            child = self.children[ev[1]]
            if child.reported:
                continue
            if child.start_error is None and child.status == 0:
                child.reported = True
                status.life(self.rank, self.host, child.spec.role, "exit", code=0)
                self._finish_relay(child)
                if child.spec.role == "worker" and self.tell_rank0:
                    jobdone.send_done(child.spec.env, self.rank)
                if not self._running() or jobdone.stop_scheduler_if_all_done(self):
                    return 0
                if child.spec.role == "worker" and "scheduler" in self.children:
                    deadline = time.monotonic() + self.scheduler_grace
                continue
            # a child failed
            if child.signal in TEARDOWN_SIGNALS:
                # mpirun signals the whole process group: our own SIGTERM may be right behind.
                sig = self._pending_signal(TEARDOWN_SIGNAL_WINDOW)
                if sig is not None:
                    return self._teardown(sig)
            self._report(child, cause="self")
            others = [c for c in self._running() if c is not child]
            self._terminate(others, cause="terminated")
            return child.status or 0     # set: the child exited or could not start

    def _pending_signal(self, wait: float) -> Optional[int]:
        end = time.monotonic() + wait
        held = []
        found = None
        while True:
            try:
                ev = self.events.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            if ev[0] == "signal":
                found = ev[1]
                break
            held.append(ev)
        for ev in held:
            self.events.put(ev)
        return found

    def _teardown(self, signum: int) -> int:
        self.stop_signal = int(signum)
        if self.signal_grace is not None:     # --term-grace: the workers' time to save
            self.kill_grace = self.signal_grace
        self._terminate(list(self.children.values()), cause="terminated")
        return 128 + int(signum)

    def _terminate(self, targets: Sequence[Optional[Running]], cause: str,
                   event: str = "exit") -> None:
        """SIGTERM to ``targets`` and to every orphan, SIGKILL to the whole subtree after
        ``kill_grace`` s (whatever a child started dies with it), then report."""
        with self.lock:
            self.stopping = True
        ending = [c for c in targets if c is not None and not c.reported]
        live = [c for c in ending if c.proc is not None and c.status is None]
        for proc in [c.proc for c in live if c.proc is not None]:
            _signal(proc, signal.SIGTERM)
        descendants.send(self._orphans(), signal.SIGTERM)
        self.wait_for_children(live, self.kill_grace)
        self._end_descendants(0.0)
        self.wait_for_children(live, 5.0)
        for c in ending:
            if c.proc is not None and c.status is not None:   # never-started ones: no event
                self._report(c, cause=cause, event=event)

    def wait_for_children(self, children: List[Running], timeout: float) -> None:
        """Wait until each child's exit event has arrived, or ``timeout``; other events stay."""
        end = time.monotonic() + timeout
        held = []
        while any(c.status is None and c.start_error is None for c in children):
            try:
                ev = self.events.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                break
            if ev[0] != "exit":
                held.append(ev)
        for ev in held:
            self.events.put(ev)

    def _finish_relay(self, child: Running, timeout: float = 2.0) -> None:
        for thread in (child.relay, child.hidden_relay):
            if thread is not None:
                thread.join(timeout)

    def _report(self, child: Running, cause: str, event: str = "exit") -> None:
        if child.reported:
            return
        child.reported = True
        self._finish_relay(child)
        spec = child.spec
        if child.start_error is not None:
            tail, message, ev, exc = [], child.start_error, "start-failed", None
        else:
            tail = logs.status_tail(spec.log_path, spec.env)
            message, ev = None, event
            exc = logs.status_exception(spec.log_path, spec.env, child.status, child.signal,
                                        cause)
        status.emit(self.rank, self.host, spec.role, ev, child.status, child.signal, cause,
                    os.path.abspath(spec.log_path), tail, message=message, exception=exc)


def _signal(proc: spawn.Child | Popen[bytes], sig: int) -> None:
    try:
        proc.send_signal(sig)
    except OSError:
        pass
