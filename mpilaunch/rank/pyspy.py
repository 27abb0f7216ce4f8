"""py-spy's one home: what the rank side runs it with and how its output is read, for the
live monitor's sampler (rank/monitor.py, rank/samples.py), the stacks on demand
(rank/stacks.py) and the launcher's verdict on them (stacks/verdict.py).

* :data:`MISSING`: the one wording of "py-spy is not here"; each user says what it goes
  without around it. :func:`refused` and :func:`first_error` read what py-spy said instead of
  stacks.
* :func:`is_library`: the one rule for a frame that is not the user's own code (the
  interpreter's library, an installed package, a native frame): the hot frame, the verdict's
  place and the source lines under a dump's frames all follow it.
* ``record``: :func:`record_argv` and :func:`parse_raw` (its raw output, on every Python it
  reads, 3.9 to 3.13); ``dump``: :func:`dump_frame` (one frame line) and :func:`annotate` (the
  user's source line under each of its frames).

* :func:`find` (beside this interpreter, else on the worker's PATH) and :func:`dump` (``py-spy
  dump``, for the stall watchdog's stacks file and the stacks on demand).

Pure but for :func:`find`, :func:`dump` and :func:`source_line`'s reads of the user's files;
imports only ``os`` (every sampled rank loads it; :func:`dump` imports subprocess when it runs).
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Sequence, Tuple

MISSING = "py-spy is not installed here (pip install 'mpilaunch[stall]', or pip install py-spy)"
REFUSED = ("Permission denied", "Permission Denied", "Operation not permitted")
DUMP_TIMEOUT = 20.0   # s a ``py-spy dump`` may take before it is given up


def find(env_path: "Optional[str]") -> str:
    """``py-spy`` next to this interpreter, else on the worker's PATH, else ""."""
    import sys

    dirs = [os.path.dirname(sys.executable)] + (env_path or os.defpath).split(os.pathsep)
    for d in dirs:
        candidate = os.path.join(d or ".", "py-spy")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return ""


def dump(pid: int, py_spy: str, more: "Sequence[str]" = ()) -> str:
    """``py-spy dump --pid PID [more]``, headed by the command and its exit status."""
    import subprocess

    extra = "".join(f" {m}" for m in more)
    try:
        r = subprocess.run([py_spy, "dump", "--pid", str(pid), *more], capture_output=True,
                           text=True, timeout=DUMP_TIMEOUT, stdin=subprocess.DEVNULL)
        return f"== py-spy dump --pid {pid}{extra} (exit {r.returncode})\n{r.stdout}{r.stderr}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"== py-spy dump --pid {pid}{extra}: {exc}\n"


def is_library(path: str) -> bool:
    """A frame of the interpreter's library or of an installed package, not the user's code."""
    return ("/site-packages/" in path or "/dist-packages/" in path or "/lib/python" in path
            or not path.endswith(".py") or path.startswith("<"))


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


def _frame(text: str) -> Optional[Tuple[str, str, int]]:
    """``func (/path/file.py:41)`` -> (func, path, line); ``func (lib.so)`` (``--native``) ->
    (func, lib.so, 0); None for anything else."""
    func, sep, where = text.rpartition(" (")
    if not sep or not where.endswith(")"):
        return None
    path, sep, line = where[:-1].rpartition(":")
    if not sep or not line.isdigit():
        return func, where[:-1], 0
    return func, path, int(line)


def dump_frame(line: str) -> Optional[Tuple[str, str, int]]:
    """One line of ``py-spy dump``'s text -> its frame (as :func:`_frame`), None when the line
    is not a frame (a thread's head, a source line under a frame, a blank)."""
    if not line.startswith("    ") or line[4:5] in ("", " ", ">"):
        return None
    return _frame(line[4:])


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
    lines: List[Tuple[str, List[str], int]] = []
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        head, *parts = stack.split(";")
        lines.append((head, parts, int(n)))
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


def annotate(text: str, read: Callable[[str, int], str] = source_line) -> str:
    """``py-spy dump``'s text with, under each frame of the user's own code (not
    :func:`is_library`'s), ``    > `` and that line of its file (``read(path, line)``): an
    mpi4py call has no frame of its own, only the user's line shows it (stacks/verdict.py)."""
    out = []
    for line in text.splitlines():
        out.append(line)
        frame = dump_frame(line)
        if frame is None or not frame[2] or not frame[1].startswith("/") or is_library(frame[1]):
            continue
        src = read(frame[1], frame[2])
        if src:
            out.append(f"    > {src}")
    return "\n".join(out) + "\n"
