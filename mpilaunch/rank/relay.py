"""The output relay of a tailed worker: pipe -> its log file (verbatim) + the console (each
line prefixed ``[rank<R>] ``). Split out of supervisor.py (which starts the relay thread)."""
from __future__ import annotations

import os
import select
import time

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from threading import Thread
    from typing import Callable, Optional, Tuple, Union

TIMES_EVERY_NS = 50_000_000   # at most a times record every 0.05 s: a flood adds 320 B/s to the index

F_SETPIPE_SZ = 1031
READ_CHUNK = 1 << 20
# Pipe capacity for the relay (worker -> adapter -> mpirun): 1 MiB cuts the relay's CPU by
# more than half against the default 64 KiB (measured: 200 MB of 100-byte lines, 0.75 s ->
# 0.3 s of adapter CPU). Pipe pages count against a per-user soft limit (64 MiB by default
# for non-root), so nodes with many ranks use less.
PIPE_SIZE = 1 << 20
PIPE_SIZE_MANY_RANKS = 256 << 10
MANY_RANKS = 8      # more ranks than this on one host: each relay gets PIPE_SIZE_MANY_RANKS


def pipe_size(local_size: int) -> int:
    """The relay pipe's capacity for a rank whose host runs ``local_size`` ranks."""
    return PIPE_SIZE if local_size <= MANY_RANKS else PIPE_SIZE_MANY_RANKS


def _write_all(fd: int, *parts: Union[bytes, memoryview]) -> bool:
    """Write every part (bytes or memoryview) with as few syscalls as possible."""
    views = [memoryview(p) for p in parts if len(p)]
    while views:
        try:
            n = os.writev(fd, views)
        except InterruptedError:
            continue
        except OSError:
            return False
        while views and n >= len(views[0]):
            n -= len(views[0])
            views.pop(0)
        if n:
            views[0] = views[0][n:]
    return True


def grow_pipe(fd: int, size: int) -> None:
    """Best effort: a bigger pipe means fewer wake-ups per megabyte."""
    try:
        import fcntl
        import stat

        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            fcntl.fcntl(fd, F_SETPIPE_SZ, size)
    except OSError:
        pass


def times_path(log_path: str) -> str:
    """The times index next to a log: ``dir/.<name>.times``, hidden so that nothing listing
    the logs (``mpilaunch logs``, a glob of ``worker_*.log``) sees it. Records of 16 bytes,
    little-endian: the log's byte offset where a chunk starts, the wall time (ns) it was read;
    read by mpilaunch/output/logview.py."""
    head, name = os.path.split(log_path)
    return os.path.join(head, "." + name + ".times")


class _Times:
    """A log's times index being written: a record (offset, time read) for a chunk read 0.05 s
    or more after the last record."""
    __slots__ = ("fd", "offset", "last_ns")

    def __init__(self, fd: int, offset: int) -> None:
        self.fd, self.offset, self.last_ns = fd, offset, 0

    @classmethod
    def open(cls, log_fd: int) -> "_Times | None":
        """The times index of the regular file open on ``log_fd`` (its name from /proc: the
        supervisor and the in-place loop give the relay the log's fd alike), emptied when the log
        is; None when there is none to write (a pipe, /dev/null, a removed log, a read-only
        dir): the log is written as before either way."""
        try:
            st = os.fstat(log_fd)
            if st.st_mode & 0o170000 != 0o100000:
                return None
            path = os.readlink(f"/proc/self/fd/{log_fd}")
            named = os.stat(path)
            if (named.st_dev, named.st_ino) != (st.st_dev, st.st_ino):
                return None
            flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if not st.st_size else 0)
            return cls(os.open(times_path(path), flags, 0o644), st.st_size)
        except OSError:
            return None

    def chunk(self, size: int) -> None:
        """A chunk of ``size`` bytes, read now, is about to go to the log."""
        now = time.time_ns()
        if now - self.last_ns >= TIMES_EVERY_NS:
            self.last_ns = now
            if not _write_all(self.fd, self.offset.to_bytes(8, "little") + now.to_bytes(8, "little")):
                self.last_ns = 1 << 62     # a record missing would date later lines early:
                try:                       # none at all, and the viewer estimates
                    os.ftruncate(self.fd, 0)
                except OSError:
                    pass
        self.offset += size


def _log_lines(log_fd: int, text: bytes) -> bytes:
    """Write the whole lines of ``text`` to the log; -> the partial last line, held (a line
    longer than a chunk goes as it comes). For torchrun's ``--redirects 1`` or ``2``, whose
    kept-off stream has a relay of its own to the same log (``to_console`` False): each relay
    writes whole lines (a partial one after a quiet ``partial_delay``), so neither stream cuts
    a line of the other."""
    end = text.rfind(b"\n") + 1
    if not end and len(text) >= READ_CHUNK:
        end = len(text)
    if end:
        _write_all(log_fd, memoryview(text)[:end])
    return text[end:]


def _to_console(out_fd: int, chunk: bytes, prefix: bytes, nl_prefix: bytes, at_line_start: bool,
                pending: bytes) -> "tuple[bool, bool, bytes]":
    """A chunk's complete lines to the console, each with ``prefix``; the rest held ->
    (the console still writable, at a line's start, what is held)."""
    cut = chunk.rfind(b"\n")
    if cut < 0:
        pending += chunk
        if len(pending) >= READ_CHUNK:
            return _write_all(out_fd, prefix if at_line_start else b"", pending), False, b""
        return True, at_line_start, pending
    body = chunk.replace(b"\n", nl_prefix)
    end = len(body) - (len(chunk) - cut - 1) - len(prefix)  # just past the last \n
    head = prefix if at_line_start else b""
    return _write_all(out_fd, head, pending, memoryview(body)[:end]), True, chunk[cut + 1:]


def relay(read_fd: int, log_fd: int, prefix: bytes, out_fd: int = 1,
          partial_delay: float = 0.1, pipe_size: int = PIPE_SIZE,
          on_first: Optional[Callable[[], None]] = None,
          log_lines: bool = False, to_console: bool = True) -> None:
    """Copy ``read_fd`` to ``log_fd`` verbatim and to ``out_fd`` with ``prefix`` on each line;
    ``on_first()`` once the first chunk is in the log (the event record's first output);
    ``log_lines``, ``to_console``: torchrun's ``--redirects 1``/``2`` (:func:`_log_lines`).
    Unless ``log_lines`` (two relays share that log, so neither knows its offsets), a record
    (offset, time read) goes to the log's times index (:func:`times_path`) for a chunk read
    0.05 s or more after the last record: a line's time is its chunk's, at most 0.05 s early.
    Per chunk (up to 1 MiB): one ``write`` to the log, one ``bytes.replace`` and one ``writev``
    to the console; only complete lines go to the console, so lines from different ranks never
    interleave mid-line in mpirun's output."""
    nl_prefix = b"\n" + prefix
    at_line_start, pending = True, b""
    console = to_console
    held = b""      # log_lines: the partial last line not yet in the log
    grow_pipe(out_fd, pipe_size)
    times = None if log_lines else _Times.open(log_fd)
    try:
        while True:
            if pending or held:
                ready, _, _ = select.select([read_fd], [], [], partial_delay)
                if not ready:          # quiet: show the partial line (a prompt, a progress bar)
                    _write_all(log_fd, held)    # nothing when nothing is held
                    held = b""
                    if pending:
                        if console:
                            console = _write_all(out_fd, prefix if at_line_start else b"", pending)
                        at_line_start, pending = False, b""
                    continue
            try:
                chunk = os.read(read_fd, READ_CHUNK)
            except InterruptedError:
                continue
            if not chunk:
                break
            if log_lines:
                held = _log_lines(log_fd, held + chunk)
            else:
                if times is not None:
                    times.chunk(len(chunk))
                _write_all(log_fd, chunk)
            if on_first is not None:
                on_first()
                on_first = None
            if console:
                console, at_line_start, pending = _to_console(out_fd, chunk, prefix, nl_prefix,
                                                              at_line_start, pending)
        _write_all(log_fd, held)
        if console and (pending or not at_line_start):   # end the rank's last line
            _write_all(out_fd, prefix if at_line_start and pending else b"", pending, b"\n")
    finally:
        os.close(read_fd)
        os.close(log_fd)
        if times is not None:
            os.close(times.fd)


def relay_threads(role: str, prefix: bytes, read_fd: int, hid_r: "int | None", log_fd: int,
                  out_fd: int, pipe_size: int, first: Optional[Callable[[], None]] = None
                  ) -> Tuple[Thread, Optional[Thread]]:
    """The started relay threads of a tailed child -> (its output's to the log and the
    console, or with torchrun's --redirects 1 or 2 the kept-off stream's (``hid_r``) to the
    log alone, else None); with both, each writes whole lines only to the one log."""
    import threading

    hidden = None
    if hid_r is not None:
        hidden = threading.Thread(target=relay, args=(hid_r, os.dup(log_fd), b"", out_fd, 0.1,
                                                      pipe_size, None, True, False),
                                  name=f"relay-{role}-log", daemon=True)
        hidden.start()
    main = threading.Thread(target=relay, args=(read_fd, log_fd, prefix, out_fd, 0.1, pipe_size,
                                                first, hid_r is not None),
                            name=f"relay-{role}", daemon=True)
    main.start()
    return main, hidden
