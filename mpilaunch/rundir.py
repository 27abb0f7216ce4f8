"""The launcher's private run directory (hostfile, tune file), the one atomic file writer
(:func:`write_atomic`: the run dir's files, ``mpilaunch job``'s hostfile, the mpirun version
cache), and reclaiming the run dirs of dead launchers.

A launcher that is SIGKILLed cannot remove its run dir (``$TMPDIR/mpilaunch-*``), and Open MPI
5's mpirun, killed with it, may leave its session dir ``$TMPDIR/ompi.<mpirun pid>``. Each run
dir therefore holds an ``owner`` file: the launcher's pid and start time, and mpirun's pid once
started. Every later launch (and ``mpilaunch check``) removes the run dirs of this user whose
launcher is gone, with the ``ompi.<pid>`` dir of their mpirun if that process is gone too.
Nothing else is touched: only directories named by an owner file we wrote.

Neither ``tempfile`` nor ``shutil``: they import ``random``, ``bz2``, ``lzma`` and ``zlib`` into
every launch's start (docs/ARCHITECTURE.md, start-up) for a directory name, the temp dir's
place and a removal (:func:`temp_dir`, :func:`make`, :func:`remove_tree` do the part of them a
run dir needs).
"""
from __future__ import annotations

import os
import stat

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Protocol

    class _PlanFiles(Protocol):
        """What :func:`remove_files` reads of a backend's plan."""

        tune_path: str
        hostfile_path: str

from mpilaunch import procstat

PREFIX = "mpilaunch-"
OWNER = "owner"


def write_atomic(path: str, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` so that no reader ever sees it half-written: a new file
    beside it (exclusive, never through a symlink, ``mode`` whatever the umask), renamed over
    ``path``. Raises OSError (the new file removed); ``path`` is then as it was.

    No fsync: the readers are this host's mpirun moments later (the page cache), the run
    directory is removed when the job ends, and a crash loses the job anyway (what an fsync
    costs a launch: docs/ARCHITECTURE.md, start-up)."""
    directory, base = os.path.split(os.path.abspath(path))
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            os.fchmod(fd, mode)
            data = memoryview(text.encode("utf-8", "surrogateescape"))
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _start_time(pid: int) -> Optional[int]:
    """The process's start time (``/proc/PID/stat`` field 22), or None if there is no such
    process or it is a zombie. Tells a live launcher from a reused pid."""
    return procstat.start_time(pid)


def temp_dir() -> str:
    """Where temporary files go, as ``tempfile.gettempdir`` decides it: ``$TMPDIR``, ``$TEMP``,
    ``$TMP``, /tmp, /var/tmp, /usr/tmp, then the working directory; the first that is a
    directory this user may write to."""
    candidates = [os.environ.get(n) for n in ("TMPDIR", "TEMP", "TMP")]
    for d in [c for c in candidates if c] + ["/tmp", "/var/tmp", "/usr/tmp"]:
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return os.path.abspath(d)
    return os.getcwd()


def make() -> str:
    """A private directory (0700) for the files of one job, with its owner file."""
    base = temp_dir()
    while True:
        path = os.path.join(base, PREFIX + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            break
        except FileExistsError:
            continue
    _write_owner(path, None)
    return path


def remove_tree(path: str) -> None:
    """``path`` and all below it, whatever cannot be removed left (``shutil.rmtree`` with
    ``ignore_errors``); a symbolic link is removed, never followed."""
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            os.unlink(path)
            return
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def _write_owner(path: str, mpirun_pid: Optional[int]) -> None:
    pid = os.getpid()
    write_atomic(os.path.join(path, OWNER), f"{pid} {_start_time(pid)} {mpirun_pid or ''}\n")


def record_mpirun(path: str, mpirun_pid: int) -> None:
    try:
        _write_owner(path, mpirun_pid)
    except OSError:
        pass


def _alive(pid: int, start: Optional[int]) -> bool:
    now = _start_time(pid)
    return now is not None and (start is None or now == start)


def drop_session_dir(mpirun_pid: int, tmp: Optional[str] = None) -> Optional[str]:
    """Remove ``$TMPDIR/ompi.<pid>`` of an mpirun we started and have reaped, when a signal
    ended it (Open MPI 5 then leaves it). It must not outlive the pid: PMIx 5.0.11 creates its
    files there exclusively, so a later mpirun that gets the same pid (pid_max is 32768 on many
    machines) stops at once with exit 213, "The PMIx server's listener thread failed to start"
    (reproduced with a stale ``ompi.<pid>/pmix.<host>.tool``). Only a dir of this user, only
    once that process is gone. -> the path removed, or None."""
    session = os.path.join(tmp or temp_dir(), f"ompi.{mpirun_pid}")
    try:
        if os.lstat(session).st_uid != os.geteuid() or _start_time(mpirun_pid) is not None:
            return None
    except OSError:
        return None
    remove_tree(session)
    return session


def reclaim_stale(tmp: Optional[str] = None) -> List[str]:
    """Remove the run dirs (and Open MPI session dirs) of this user's dead launchers.
    -> the paths removed. Never raises: reclaiming is a courtesy, not part of the launch."""
    tmp = tmp or temp_dir()
    removed: List[str] = []
    try:
        names = [n for n in os.listdir(tmp) if n.startswith(PREFIX)]
    except OSError:
        return removed
    uid = os.geteuid()
    for name in names:
        path = os.path.join(tmp, name)
        try:
            if os.lstat(path).st_uid != uid:
                continue
            with open(os.path.join(path, OWNER)) as fh:
                fields = fh.read().split()
            pid = int(fields[0])
            start = int(fields[1]) if len(fields) > 1 and fields[1] != "None" else None
            mpirun_pid = int(fields[2]) if len(fields) > 2 else None
        except (OSError, ValueError, IndexError):
            continue   # not ours, not finished being written, or an older version's
        if _alive(pid, start):
            continue
        session = drop_session_dir(mpirun_pid, tmp) if mpirun_pid else None
        if session:
            removed.append(session)
        remove_tree(path)
        removed.append(path)
    return removed


# ---------------------------------------------------------------- one job's run dir

def new() -> str:
    """A private directory (0700) for the files of one attempt; those of dead launchers
    (SIGKILL leaves them) are reclaimed first."""
    reclaim_stale()
    return make()


def close_ssh_masters(run_dir: str) -> None:
    """The preflight's ssh control masters (mpilaunch/ssh.py), while their sockets exist."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return
    if any(n.startswith("cm-") for n in names):
        from mpilaunch import ssh   # only when the preflight left masters: ssh imports socket

        ssh.close_masters(run_dir)


def remove(run_dir: str) -> None:
    """A run dir whose launch did not start (preflight failed, bad plan): all of it, its ssh
    masters first."""
    close_ssh_masters(run_dir)
    remove_tree(run_dir)


def remove_files(plan: _PlanFiles, run_dir: str, keep_tune: bool) -> None:
    """After an attempt: the run dir, but a tune file the user asked to keep (--keep-tune-file)
    and the directory that holds it."""
    if not keep_tune:
        try:
            os.unlink(plan.tune_path)
        except FileNotFoundError:
            pass
    if keep_tune and os.path.dirname(plan.tune_path) == run_dir:
        try:
            os.unlink(plan.hostfile_path)
        except FileNotFoundError:
            pass
        return
    remove_tree(run_dir)
