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

The first sample comes one interval after the worker started and carries no stacks (the first
py-spy starts then): a job shorter than the interval never runs py-spy. Without py-spy, or
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

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Set, Tuple

RATE = 10                 # stack samples a second while py-spy records
REFUSED = ("Permission denied", "Permission Denied", "Operation not permitted")
NO_PY_SPY = "py-spy is not installed here (pip install 'mpilaunch[stall]', or pip install py-spy)"
SCHEDULER = "none: the scheduler's stacks are not sampled (it waits for the workers by design)"
GIVE_UP = 3               # py-spy failing this many times in a row on one process: no more tries
RECORD_SHARE = 0.6        # of each interval py-spy records (it takes 1-3 s to attach on a loaded host)
UNSURE = 0.2              # a sync region's share above which, with no thread state, the wait is unknown

# Where a rank of real training waits for the others with no collective's frame on its Python
# stack: the collective runs in C++ under a Python frame of the library that launched it.
# DDP's gradient all-reduce is launched by the reducer's autograd hooks and waited for in
# C++ under loss.backward() (the innermost Python frame is autograd's _engine_run_backward:
# Lightning, Accelerate and the Hugging Face Trainer all call it); FSDP waits for its
# all-gathers and reduce-scatters in its own files, ZeroRedundancyOptimizer in step(), DDP's
# forward in its buffer broadcast. The same frames also hold the backward's own compute, so
# a sample there is a wait only when the thread is asleep on a futex (:class:`States`).
SYNC_FILES = ("torch/autograd/graph.py", "torch/autograd/__init__.py")
SYNC_DIRS = ("/torch/distributed/", "/torch/nn/parallel/", "/deepspeed/")
# futex(2) (and futex_waitv) by architecture: /proc/PID/syscall gives the number a thread is
# blocked in; elsewhere the kernel function it sleeps in (wchan) is read instead
FUTEX = {"x86_64": ("202", "449"), "aarch64": ("98", "449")}


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


def _frame(text: str):
    """``func (/path/file.py:41)`` -> (func, path, line); None for anything else."""
    func, sep, where = text.rpartition(" (")
    if not sep or not where.endswith(")"):
        return None
    path, sep, line = where[:-1].rpartition(":")
    if not sep or not line.isdigit():
        return func, where[:-1], 0
    return func, path, int(line)


def _thread_id(head: str) -> str:
    """``thread (8452): MainThread`` -> ``8452``; ``thread (0x7F3D...)`` -> ``0x7F3D...``."""
    return head[head.find("(") + 1:head.find(")")] if head.startswith("thread (") else ""


def _main_python_id(lines: List[Tuple[str, List[str], int]]) -> Optional[str]:
    """Python 3.9 and 3.10 give py-spy no OS thread id: it prints the thread's Python id in hex
    (``thread (0x7F3D0A1B2B80)``). The main thread is then the one whose stacks start in the
    script (``<module>``, or runpy's ``_run_module_as_main`` for ``-m``) or say ``MainThread``,
    never in threading.py's ``_bootstrap`` (every ``threading.Thread`` starts there)."""
    votes: Dict[str, int] = {}
    for head, parts, count in lines:
        ident = _thread_id(head)
        if not ident.startswith("0x"):
            continue
        outer = parts[0] if parts else ""
        if head.endswith(": MainThread") or outer.startswith(("<module> (", "_run_module_as_main (")):
            votes[ident] = votes.get(ident, 0) + count
        elif "threading.py:" in outer:
            votes[ident] = votes.get(ident, 0) - count
    best = max(sorted(votes), key=votes.__getitem__) if votes else None
    return best if best is not None and votes[best] > 0 else None


def parse_raw(text: str, tid: int) -> List[Tuple[list, int]]:
    """py-spy's ``record --threads --format raw`` -> [(frames of the main thread, innermost
    first, as (func, path, line)), samples]: one entry a distinct stack. A line is
    ``thread (TID): NAME;outer (f.py:1);...;inner (g.py:2) COUNT``; TID is the OS thread id
    (``tid``: the worker's pid for its main thread) on Python 3.11 and later, the Python
    thread id in hex on 3.9 and 3.10 (:func:`_main_python_id` picks the main thread's)."""
    lines = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        head, *parts = stack.split(";")
        lines.append((head, parts, int(count)))
    want = str(tid)
    if not any(_thread_id(head) == want for head, _, _ in lines):
        want = _main_python_id(lines) or want
    out = []
    for head, parts, count in lines:
        if _thread_id(head) != want:
            continue
        frames = [f for f in (_frame(p) for p in parts) if f is not None]
        if frames:
            out.append((frames[::-1], count))
    return out


def source_line(path: str, line: int) -> str:
    """Line ``line`` of ``path`` (stripped), '' when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for i, text in enumerate(f, 1):
                if i == line:
                    return text.strip()
    except OSError:
        pass
    return ""


def summarize(stacks, read=source_line) -> Tuple[Optional[float], Optional[str], int]:
    """(wait share, hot frame, samples) of one thread's stacks (:func:`parse_raw`). A stack
    waits in a collective by rank/collectives.py's rule; its innermost user frame's source line
    is read (``read(path, line)``) for mpi4py, whose calls have no Python frame of their own."""
    from mpilaunch.rank import collectives

    waiting, total = 0, 0
    places: Dict[str, int] = {}
    lines: Dict[Tuple[str, int], str] = {}
    for raw, count in stacks:
        frames = [collectives.Frame(f, p, n, "") for f, p, n in raw]
        inner = frames[0]
        if inner.line and not collectives.is_library(inner.path):
            key = (inner.path, inner.line)
            if key not in lines:
                lines[key] = read(*key)
            frames[0] = inner._replace(source=lines[key])
        total += count
        if collectives.collective_of(frames):
            waiting += count
        else:
            where = collectives.at(frames)
            places[where] = places.get(where, 0) + count
    if not total:
        return None, None, 0
    hot = max(sorted(places), key=places.__getitem__) if places else None
    return waiting / total, hot, total


def in_sync_region(frames: List[Tuple[str, str, int]]) -> bool:
    """Whether a stack (innermost first) is inside a library's synchronising call with no
    collective's frame of its own: its innermost Python frame is one of :data:`SYNC_FILES` or
    under :data:`SYNC_DIRS` (torch.distributed's own collectives count as collectives first)."""
    path = frames[0][1] if frames else ""
    return path.endswith(SYNC_FILES) or any(d in path for d in SYNC_DIRS)


def sync_share(stacks) -> float:
    """The share of one thread's stack samples (:func:`parse_raw`) inside a sync region that
    is not a recognised collective (:func:`in_sync_region`)."""
    from mpilaunch.rank import collectives

    inside, total = 0, 0
    for raw, count in stacks:
        total += count
        if in_sync_region(raw) and not collectives.collective_of(
                [collectives.Frame(f, p, n, "") for f, p, n in raw]):
            inside += count
    return inside / total if total else 0.0


def wait_of(collective: Optional[float], sync: float, futex: Optional[float]) -> Optional[float]:
    """A rank's wait share from its stacks and its main thread's states over one interval.

    ``collective``: the share in a recognised collective (counted whole, as before: mpi4py
    spins in its calls, so only the stack tells there); ``sync``: the share inside a sync
    region (DDP's backward, FSDP); ``futex``: the share of /proc samples asleep on a futex
    (None: not readable). Measured on a 4-rank DDP gloo job (docs/MONITOR.md): the ranks that
    wait for a slow reader spend 0.94-1.00 of their samples under backward and 0.76-0.92
    asleep on a futex; the slow rank 0.10-0.19 under backward (its own compute) and 0.06-0.08
    on a futex (its time goes to its reader's sleep, another syscall); balanced, 0.96-0.98
    and 0.42-0.58 (four ranks on two cores wait for each other's time slices), and a model
    64 times as wide 0.63-0.76 and 0.27-0.40: the backward share counts the compute as
    waiting, the futex share does not. py-spy's record carries no idle flag per sample and
    ``--native`` pauses the worker for each stack (0.7 s of CPU a dump), so the two are
    sampled apart and joined by their bound: a sample waits in a sync region no more often
    than either share allows (the futex sleeps inside a collective already counted are taken
    out first). Without the thread's states a large sync share cannot be told: None."""
    if collective is None:
        return None
    if sync <= 0.0:
        return collective
    if futex is None:
        return None if sync >= UNSURE else collective
    return round(min(1.0, collective + min(sync, max(0.0, futex - collective))), 4)


def to_tick(now: float, interval: float) -> float:
    """Seconds from wall time ``now`` to the next multiple of ``interval`` (the next tick).
    Every adapter samples over the same windows of the wall clock, whenever it started: the
    launcher's round then compares the ranks over one stretch of the job, and a pause (a
    checkpoint, the start of the steps) falls in the same round for every rank instead of
    making a gap out of the adapters' different start times (hosts' clocks agree to NTP's
    milliseconds)."""
    left = interval - now % interval
    return left if left > 1e-3 else interval


class States:
    """The main thread's kernel state of each sampled worker, read from
    ``/proc/PID/task/PID/syscall`` at the stack sampler's rate: how often it is asleep on a
    futex (a C++ condition variable: DDP's reducer and gloo's work waiting for the others; a
    sleep, a read or a computing thread is not). One file kept open per worker and read again
    from its start (``pread``: the kernel makes it anew each time): 1-2 us a read, no process."""

    def __init__(self) -> None:
        self.futex = FUTEX.get(os.uname().machine)
        self.counts: Dict[int, List[int]] = {}     # pid -> [samples, asleep on a futex]
        self.blind: Set[int] = set()               # pids whose state may not be read
        self.fds: Dict[int, int] = {}

    def sample(self, pid: int) -> None:
        if pid in self.blind:
            return
        fd = self.fds.get(pid)
        try:
            if fd is None:
                name = "syscall" if self.futex is not None else "wchan"
                fd = self.fds[pid] = os.open(f"/proc/{pid}/task/{pid}/{name}", os.O_RDONLY)
            data = os.pread(fd, 64, 0)
        except PermissionError:
            self.blind.add(pid)
            self.drop(pid)
            return
        except OSError:         # it ended
            self.drop(pid)
            return
        on = (data.split(b" ", 1)[0].decode() in self.futex if self.futex is not None
              else b"futex" in data)
        got = self.counts.setdefault(pid, [0, 0])
        got[0] += 1
        got[1] += on

    def take(self, pid: int) -> Optional[float]:
        """The futex share since the last take (None: none read), and the count starts again."""
        n, on = self.counts.pop(pid, (0, 0))
        return on / n if n else None

    def drop(self, pid: int) -> None:
        fd = self.fds.pop(pid, None)
        if fd is not None:
            os.close(fd)

    def keep(self, pids: Set[int]) -> None:
        """Forget every worker but ``pids`` (one restarted in place, or ended)."""
        for pid in [p for p in self.fds if p not in pids]:
            self.drop(pid)


def refused(text: str) -> Optional[str]:
    """py-spy's words when the kernel refused it the worker (ptrace), else None."""
    for word in REFUSED:
        if word in text:
            return f"py-spy may not read the worker here (ptrace refused: {word}; docs/MONITOR.md)"
    return None


def first_error(text: str) -> str:
    """py-spy's first line that is not a hint or a backtrace ('' when it said nothing else:
    a record without a sample, or one the rank's teardown ended)."""
    for line in text.splitlines():
        if line.strip() and not line.startswith(("py-spy>", "Stack backtrace", "   ")):
            return line.strip()[:200]
    return ""


def record_argv(py_spy: str, pid: int, seconds: int, rate: int, output: str) -> List[str]:
    """py-spy's command: every thread (idle ones too: a rank waiting in a collective sleeps in
    the kernel), without pausing the worker (``--nonblocking``), raw stacks to ``output``."""
    return [py_spy, "record", "--pid", str(pid), "--duration", str(seconds), "--rate", str(rate),
            "--format", "raw", "--threads", "--idle", "--nonblocking", "--full-filenames",
            "--output", output]


class Spy:
    """One ``py-spy record`` of ``pid`` for ``seconds``: its raw stacks on one pipe (the
    output file ``/dev/fd/N``), its messages on another; read without blocking."""

    def __init__(self, py_spy: str, pid: int, seconds: int, rate: int, preexec) -> None:
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

    def __init__(self, interval: float, rank: int, current: Callable, send: Callable,
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
            from mpilaunch.rank import watchdog    # its subprocess import: not on the start path

            self.py_spy = watchdog.find_py_spy(os.environ.get("PATH"))
        if not self.py_spy:
            self.sampler = f"none: {NO_PY_SPY}"
            self.say(NO_PY_SPY)
        from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, prctl

        fn = prctl()

        def preexec():     # a py-spy ends with this thread (the kernel's death signal)
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
        states at py-spy's rate meanwhile (:class:`States`); True when told to stop."""
        end = time.monotonic() + to_tick(time.time(), self.interval)
        self.states.keep({spy.pid for spy in self.spies.values()})
        while True:
            for spy in list(self.spies.values()):
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

    def measure(self, role: str, pid: int, log: str):
        got = usage(pid)
        if got is None:
            return None
        wait, hot, n, sampler = None, None, 0, self.sampler
        if role != "worker":
            sampler = SCHEDULER
        elif self.py_spy:
            wait, hot, n, sampler = self.stacks(role, pid)
        return self.Sample(rank=self.rank, role=role, pid=pid, t=time.time(), cpu_s=got[0],
                           rss=got[1], output_t=output_time(log), wait_share=wait, hot_frame=hot,
                           stack_samples=n, sampler=sampler)

    def stacks(self, role: str, pid: int):
        """(wait share, hot frame, samples, sampler) of the last interval's record, and the
        next record started."""
        spy = self.spies.get(role)
        out: Tuple[Optional[float], Optional[str], int, str] = (
            None, None, 0, self.notes.get(pid, "py-spy"))
        if spy is not None and spy.pid == pid and spy.wait(min(2.0, self.interval / 4)):
            del self.spies[role]
            raw, said = spy.texts()
            stacks = parse_raw(raw, pid)
            futex = self.states.take(pid)
            if stacks:
                self.failures[pid] = 0
                self.notes.pop(pid, None)
                collective, hot, n = summarize(stacks)
                out = (wait_of(collective, sync_share(stacks), futex), hot, n, "py-spy")
            elif first_error(said):
                out = self.failed(pid, said)
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

    def failed(self, pid: int, said: str):
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


def start(interval: float, rank: int, current: Callable, link) -> Monitor:
    """The monitor of this rank, sending through the control connection ``link``."""
    mon = Monitor(interval, rank, current, link.send_sample)
    mon.start()
    return mon
