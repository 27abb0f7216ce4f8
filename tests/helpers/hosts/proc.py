"""Processes: running commands (argv lists, never a shell) and the processes we start,
found by PID (checked against their start time), waited for and killed."""
import contextlib
import os
import shutil
import signal
import subprocess
import time

from .errors import TestHostsError

# Popen objects of the sshds this process started (kept so they can be reaped and do
# not trigger "subprocess is still running" ResourceWarnings when garbage-collected).
CHILDREN = {}


def run(argv, check=True, timeout=30, **kw):
    """Run argv (a list); return CompletedProcess with text stdout/stderr."""
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise TestHostsError("%s failed (exit %d): %s" % (
            " ".join(argv), proc.returncode, proc.stderr.strip() or proc.stdout.strip()))
    return proc


def quiet(argv):
    """Best-effort command for teardown: never raises, returns the exit code."""
    try:
        return subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=30).returncode
    except (OSError, subprocess.SubprocessError):
        return -1


def quiet_input(argv, text):
    """:func:`quiet` with ``text`` on the command's stdin (``ip -batch -``)."""
    try:
        return subprocess.run(argv, input=text.encode(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=60).returncode
    except (OSError, subprocess.SubprocessError):
        return -1


def _stat_fields(pid):
    """Fields of /proc/<pid>/stat after the comm field, or None if pid does not exist."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    # comm may contain spaces/parens: split after the last ')'
    return data[data.rindex(")") + 2:].split()


def starttime(pid):
    """Start time (clock ticks since boot) of pid, or None if it does not exist."""
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])


def ppid(pid):
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])


def descendants(pids):
    """All live descendants of the given pids (via /proc ppid links)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            parent = ppid(int(name))
            if parent is not None:
                children.setdefault(parent, []).append(int(name))
    out, todo = [], list(pids)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.append(c)
                todo.append(c)
    return out


def alive(pid, start=None):
    """pid exists, is not a zombie and (if start is given) has that start time, i.e.
    is still the process we recorded and not an unrelated one that reused the pid."""
    st = starttime(pid)
    if st is None:
        return False
    if start is not None and st != start:
        return False   # pid reused by an unrelated process
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def kill_all(pids, grace=2.0):
    """SIGTERM the pids, wait up to `grace` seconds, then SIGKILL the survivors."""
    pids = [p for p in pids if p and p > 1 and p != os.getpid()]
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap(pids)
        if not any(alive(p) for p in pids):
            return
        time.sleep(0.02)
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, signal.SIGKILL)
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        reap(pids)
        time.sleep(0.02)


def reap(pids):
    """Collect zombies that are our own children (sshd started by this process)."""
    for p in pids:
        child = CHILDREN.get(p)
        if child is not None:
            if child.poll() is not None:
                del CHILDREN[p]
            continue
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(p, os.WNOHANG)


def tail(path, n=20):
    """The last n lines of a log file (for error messages)."""
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


# Open MPI 5's mpirun (prterun) and its prted keep a session dir <tmp>/ompi.<pid> and
# <tmp>/prted.<pid> with PMIx rendezvous files that PMIx 5.0 creates with O_EXCL and removes
# only on a normal exit. One killed by a signal leaves them behind, and a later mpirun or prted
# that the kernel gives the same pid stops at once: "The PMIx server's listener thread failed
# to start" (exit 213). Tests that kill such processes on purpose clean up after them.
SESSION_DIRS = ("ompi.%d", "prted.%d")


def drop_session_dirs(pids):
    """Remove the Open MPI session dirs of those of ``pids`` that are gone."""
    tmps = {os.environ.get("TMPDIR") or "/tmp", "/tmp"}
    for pid in pids:
        if not pid or alive(pid):
            continue
        for tmp in tmps:
            for name in SESSION_DIRS:
                shutil.rmtree(os.path.join(tmp, name % pid), ignore_errors=True)
