"""The live monitor, rank side: every ``--sample-interval`` seconds the adapter measures its
children (the worker, and on rank 0 the MindSpore scheduler) and sends one
:class:`~mpilaunch.monitor.model.Sample` each to the launcher over its control connection
(rank/control.py: ``sample LEN MAC``). docs/MONITOR.md says what is measured and why so.

* **CPU seconds and RSS** of the child and its descendants, from ``/proc/PID/stat`` (psutil's
  import would cost every rank milliseconds: tests/rank/test_options.py holds the budget).
* **Its last output**: the modification time of its log file. Everything the worker writes
  reaches that file (a tailed worker's relay copies each chunk there first, rank/relay.py), so
  one ``stat`` a sample needs no hook in the relay.
* **Where its main thread spends the time**: ``py-spy record --nonblocking --idle`` over most of
  the interval at :data:`RATE` samples a second, raw output. The share of samples waiting in a
  collective (rank/collectives.py: torch.distributed, MindSpore, mpi4py) is ``wait_share``; the
  commonest place outside one, ``train.py:41 in load_batch``, is ``hot_frame``. Open MPI spins
  while it waits, so only the stack tells waiting from working; a sleeping or reading rank is
  not in a collective, so it shows as busy as a computing one (the straggler's signature:
  it waits least). The scheduler is not stack-sampled (it waits for the workers by design).

rank/samples.py reads each record (and the main thread's state that splits a wait under
DDP's backward from work). The first sample comes one interval after the worker started and
carries no stacks (the first py-spy starts then): a job shorter than the interval never runs py-spy. Without py-spy, or
where it may not read the worker (ptrace refused: docs/MONITOR.md), the samples go on with
CPU, memory and output only (``sampler: "none: why"``) and rank 0's adapter says so in one
line. Every py-spy is the monitor thread's child with ``PR_SET_PDEATHSIG``: none outlives the
monitor, and the supervisor ends any still running with the rest of the rank's descendants.
"""
from __future__ import annotations

import os
import threading
import time

from mpilaunch import procstat
from mpilaunch.pdeathsig import SignalsBlocked
from mpilaunch.rank import descendants, spawn, status
from mpilaunch.rank.pyspy import (  # noqa: F401 (py-spy's words, read here and named here too)
    MISSING, REFUSED, first_error, record_argv, refused)
from mpilaunch.rank.pyspy import find as pyspy_find
from mpilaunch.rank.samples import (  # noqa: F401 (the monitor's reading of a record, named here too)
    States, in_sync_region, parse_raw, source_line, summarize, sync_share, top_places, wait_of)

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Set, Tuple

    from mpilaunch.monitor.model import Sample
    from mpilaunch.rank.control import Link
    from mpilaunch.rank.supervisor import Supervisor

    # (wait share, hot frame, stack samples, sampler): what a record of py-spy's tells
    Reading = Tuple[Optional[float], Optional[str], int, str]

RATE = 10                 # stack samples a second while py-spy records
NO_PY_SPY = MISSING
SCHEDULER = "none: the scheduler's stacks are not sampled (it waits for the workers by design)"
GIVE_UP = 3               # py-spy failing this many times in a row on one process: no more tries
RECORD_SHARE = 0.6        # of each interval py-spy records (it takes 1-3 s to attach on a loaded host)


def usage(pid: int) -> Optional[Tuple[float, int]]:
    """(CPU seconds, RSS bytes) of ``pid`` and its live descendants (with the CPU of the
    children it has reaped), or None once it is gone."""
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    cpu, rss = 0, 0
    for n, p in enumerate([pid] + descendants.subtree(pid)):
        got = procstat.fields(p)
        if not got or len(got) < 22:
            if n == 0:
                return None
            continue
        # proc(5): utime 14, stime 15, cutime 16, cstime 17, rss 24 (fields from 3 on here)
        cpu += int(got[11]) + int(got[12]) + (int(got[13]) + int(got[14]) if n == 0 else 0)
        rss += int(got[21])
    return cpu / tick, rss * page


def output_time(log_path: str) -> Optional[float]:
    """When the child last wrote output (its log file's mtime); None before its first byte."""
    try:
        st = os.stat(log_path)
    except OSError:
        return None
    return st.st_mtime if st.st_size else None


def to_tick(now: float, interval: float) -> float:
    """Seconds from wall time ``now`` to the next multiple of ``interval`` (the next tick).
    Every adapter samples over the same windows of the wall clock, whenever it started: the
    launcher's round then compares the ranks over one stretch of the job, and a pause (a
    checkpoint, the start of the steps) falls in the same round for every rank instead of
    making a gap out of the adapters' different start times (hosts' clocks agree to NTP's
    milliseconds)."""
    left = interval - now % interval
    return left if left > 1e-3 else interval


class Spy:
    """One ``py-spy record`` of ``pid`` for ``seconds``: its raw stacks on one pipe (the
    output file ``/dev/fd/N``), its messages on another; read without blocking."""

    def __init__(self, py_spy: str, pid: int, seconds: int, rate: int,
                 preexec: Optional[Callable[[], None]]) -> None:
        self.pid = pid
        data_r, data_w = os.pipe()
        msg_r, msg_w = os.pipe()
        argv = record_argv(py_spy, pid, seconds, rate, f"/dev/fd/{data_w}")
        try:
            env = {"PATH": os.environ.get("PATH", os.defpath)}    # not the adapter's key
            self.child = spawn.start(argv, env, stdin=spawn.DEVNULL, stdout=msg_w,
                                     pass_fds=(data_w,), preexec=preexec)
        except OSError:
            os.close(data_r)
            os.close(msg_r)
            raise
        finally:
            os.close(data_w)
            os.close(msg_w)
        for fd in (data_r, msg_r):
            os.set_blocking(fd, False)
        self.fds = {data_r: bytearray(), msg_r: bytearray()}
        self.open = {data_r, msg_r}
        self.data_fd, self.msg_fd = data_r, msg_r

    def poll(self) -> bool:
        """Read what has come; True once py-spy has closed both pipes (it has ended)."""
        for fd in list(self.open):
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    chunk = b""
                if not chunk:
                    self.open.discard(fd)
                    os.close(fd)
                    break
                self.fds[fd] += chunk
        if self.open:
            return False
        try:
            os.waitpid(self.child.pid, 0)
        except ChildProcessError:   # reaped by the supervisor, which reaps the adapter's orphans
            pass
        return True

    def sampling(self) -> bool:
        """Whether py-spy is taking its samples now: it has said so (it says it once attached,
        which takes 1-3 s on a loaded host) and not ended."""
        return not self.poll() and b"Sampling process" in self.fds[self.msg_fd]

    def texts(self) -> Tuple[str, str]:
        return (self.fds[self.data_fd].decode("utf-8", "replace"),
                self.fds[self.msg_fd].decode("utf-8", "replace"))

    def wait(self, timeout: float) -> bool:
        """:meth:`poll` until py-spy has ended, for up to ``timeout`` s."""
        import select     # loaded by every rank already (rank/relay.py)

        end = time.monotonic() + timeout
        while not self.poll():
            left = end - time.monotonic()
            if left <= 0:
                return False
            select.select(list(self.open), [], [], left)
        return True

    def stop(self) -> None:
        if self.open:
            try:
                self.child.kill()
            except OSError:     # ended (and reaped by the supervisor) meanwhile
                pass
            for fd in self.open:
                os.close(fd)
            self.open = set()


class Monitor(threading.Thread):
    """Every ``interval`` s: one sample per running child of the current supervisor
    (``current()``, which changes with an in-place restart) through ``send(bytes)``."""

    def __init__(self, interval: float, rank: int, current: Callable[[], Optional[Supervisor]],
                 send: Callable[[bytes], bool],
                 py_spy: Optional[str] = None, rate: int = RATE) -> None:
        super().__init__(name="monitor", daemon=True)
        self.interval, self.rank, self.current, self.send = interval, rank, current, send
        self.py_spy, self.rate = py_spy, rate     # None: looked for as the thread starts
        self.sampler = "py-spy"
        self.spies: Dict[str, Spy] = {}
        self.failures: Dict[int, int] = {}
        self.notes: Dict[int, str] = {}     # pid -> why it has no stacks
        self.done = threading.Event()
        self.states = States()
        self.preexec: Optional[Callable[[], None]] = None

    def start(self) -> None:
        """Started with the adapter's signals blocked (they are for the main thread)."""
        with SignalsBlocked():
            super().start()

    def say(self, why: str) -> None:
        if self.rank == 0:
            status.write_stderr(f"mpilaunch.rank: the monitor samples CPU, memory and output "
                                f"only: {why}\n")

    def run(self) -> None:
        # the first sample's imports wait for it: the worker's start-up has the host's CPU to
        # itself; then every tick falls on the wall clock's multiples of the interval
        if self.done.wait(self.interval + to_tick(time.time(), self.interval)):
            return
        if self.py_spy is None:
            self.py_spy = pyspy_find(os.environ.get("PATH"))
        if not self.py_spy:
            self.sampler = f"none: {NO_PY_SPY}"
            self.say(NO_PY_SPY)
        from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, prctl

        fn = prctl()

        def preexec() -> None:     # a py-spy ends with this thread (the kernel's death signal)
            fn(PR_SET_PDEATHSIG, 9, 0, 0, 0)
        self.preexec = preexec
        from mpilaunch.monitor.model import Sample   # json, dataclasses: off the start path

        self.Sample = Sample
        try:
            while True:
                self.tick()
                if self.pause():
                    return
        finally:
            self.end_spies()
            self.states.keep(set())

    def pause(self) -> bool:
        """Wait until the next tick (:func:`to_tick`), reading the recorded workers' thread
        states at py-spy's rate while py-spy samples them (:class:`States`): the two shares a
        wait under backward is joined from cover the same seconds, so a pause (a checkpoint)
        counts in the round whose stacks hold it and in no other. True when told to stop."""
        end = time.monotonic() + to_tick(time.time(), self.interval)
        self.states.keep({spy.pid for spy in self.spies.values()})
        while True:
            for spy in list(self.spies.values()):
                if spy.sampling():
                    self.states.sample(spy.pid)
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self.done.wait(min(left, 1.0 / self.rate)):
                return True

    def children(self) -> List[Tuple[str, int, str]]:
        """(role, pid, log path) of every child still running."""
        sup = self.current()
        if sup is None:
            return []
        out = []
        for role, child in list(sup.children.items()):
            if child.proc is not None and child.status is None:
                out.append((role, child.proc.pid, child.spec.log_path))
        return out

    def tick(self) -> None:
        kids = self.children()
        for role in [r for r in self.spies if r not in {k[0] for k in kids}]:
            self.spies.pop(role).stop()
        for role, pid, log in kids:
            sample = self.measure(role, pid, log)
            if sample is not None:
                self.send(sample.to_wire())

    def measure(self, role: str, pid: int, log: str) -> Optional[Sample]:
        got = usage(pid)
        if got is None:
            return None
        wait, hot, n, sampler = None, None, 0, self.sampler
        places: list = []
        if role != "worker":
            sampler = SCHEDULER
        elif self.py_spy:
            wait, hot, n, sampler, places = self.stacks(role, pid)
        return self.Sample(rank=self.rank, role=role, pid=pid, t=time.time(), cpu_s=got[0],
                           rss=got[1], output_t=output_time(log), wait_share=wait, hot_frame=hot,
                           stack_samples=n, sampler=sampler, places=places)

    def stacks(self, role: str, pid: int) -> Tuple[Optional[float], Optional[str], int, str, list]:
        """(wait share, hot frame, samples, sampler, top places) of the last interval's record,
        and the next record started."""
        spy = self.spies.get(role)
        out: Tuple[Optional[float], Optional[str], int, str, list] = (
            None, None, 0, self.notes.get(pid, "py-spy"), [])
        if spy is not None and spy.pid == pid and spy.wait(min(2.0, self.interval / 4)):
            del self.spies[role]
            raw, said = spy.texts()
            stacks = parse_raw(raw, pid)
            futex = self.states.take(pid)
            if stacks:
                self.failures[pid] = 0
                self.notes.pop(pid, None)
                places: Dict[str, int] = {}
                collective, hot, n = summarize(stacks, places=places)
                out = (wait_of(collective, sync_share(stacks), futex), hot, n, "py-spy",
                       top_places(places, n))
            elif first_error(said):
                out = (*self.failed(pid, said), [])
        elif spy is not None and spy.pid != pid:    # restarted in place: a new worker
            self.spies.pop(role).stop()
        if role not in self.spies and self.py_spy and self.failures.get(pid, 0) < GIVE_UP:
            seconds = max(1, int(self.interval * RECORD_SHARE))
            try:
                self.spies[role] = Spy(self.py_spy, pid, seconds, self.rate, self.preexec)
            except OSError as exc:
                self.py_spy = ""
                self.sampler = f"none: cannot run py-spy: {exc.strerror or exc}"
                self.say(self.sampler[6:])
        return out

    def failed(self, pid: int, said: str) -> Reading:
        if not procstat.running(pid):     # it ended as py-spy started: nothing failed
            return None, None, 0, "py-spy"
        why = refused(said)
        if why is not None:       # the kernel's answer: the same for every later try
            self.py_spy, self.sampler = "", f"none: {why}"
            self.say(why)
            return None, None, 0, self.sampler
        self.failures[pid] = self.failures.get(pid, 0) + 1
        self.notes[pid] = f"none: {first_error(said)}"
        return None, None, 0, self.notes[pid]

    def end_spies(self) -> None:
        for spy in self.spies.values():
            spy.stop()
        self.spies = {}

    def stop(self, timeout: float = 2.0) -> None:
        """The rank is ending: no more samples, no py-spy left running."""
        self.done.set()
        if self.is_alive():
            self.join(timeout)


def start(interval: float, rank: int, current: Callable[[], Optional[Supervisor]],
          link: Link) -> Monitor:
    """The monitor of this rank, sending through the control connection ``link``."""
    mon = Monitor(interval, rank, current, link.send_sample)
    mon.start()
    return mon
