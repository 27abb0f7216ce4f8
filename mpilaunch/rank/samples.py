"""What one worker's stack samples say (rank/monitor.py takes them each interval; py-spy's raw
record is parsed in rank/pyspy.py, on every Python it reads): the share of samples that wait for the
other ranks and the hottest place outside a wait, and the main thread's kernel state that tells
a wait from work where the stack cannot (DDP's backward, FSDP's collectives: docs/MONITOR.md,
"DDP and FSDP"). Pure but for :class:`States`' reads of /proc and :func:`source_line`'s of the
user's file.
"""
from __future__ import annotations

import os

from mpilaunch.rank.pyspy import parse_raw, source_line  # noqa: F401 (read here, named here too)

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Set, Tuple

    Stacks = List[Tuple[list, int]]   # pyspy.parse_raw's: (a stack's frames, its samples)

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


def summarize(stacks: Stacks, read: Callable[[str, int], str] = source_line,
              places: Optional[Dict[str, int]] = None) -> Tuple[Optional[float], Optional[str], int]:
    """(wait share, hot frame, samples) of one thread's stacks (:func:`parse_raw`). A stack
    waits in a collective by rank/collectives.py's rule; its innermost user frame's source line
    is read (``read(path, line)``) for mpi4py, whose calls have no Python frame of their own.
    ``places``, when given, gets every place outside a wait and its samples."""
    from mpilaunch.rank import collectives

    waiting, total = 0, 0
    places = {} if places is None else places
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


def top_places(places: Dict[str, int], total: int, keep: int = 4) -> List[Tuple[str, float]]:
    """The ``keep`` commonest places outside a wait, each with its share of all ``total``
    samples, commonest first: the launcher tells a straggler's own place from the one every
    rank shares (monitor/straggler.py's ``own_place``)."""
    ranked = sorted(places.items(), key=lambda kv: (-kv[1], kv[0]))[:keep]
    return [(place, round(n / total, 3)) for place, n in ranked] if total else []


def in_sync_region(frames: List[Tuple[str, str, int]]) -> bool:
    """Whether a stack (innermost first) is inside a library's synchronising call with no
    collective's frame of its own: its innermost Python frame is one of :data:`SYNC_FILES` or
    under :data:`SYNC_DIRS` (torch.distributed's own collectives count as collectives first)."""
    path = frames[0][1] if frames else ""
    return path.endswith(SYNC_FILES) or any(d in path for d in SYNC_DIRS)


def sync_share(stacks: Stacks) -> float:
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
