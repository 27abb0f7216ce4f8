"""The output relay of a tailed worker: pipe -> its log file (verbatim) + the console (each
line prefixed ``[rank<R>] ``). Split out of supervisor.py (which starts the relay thread)."""
from __future__ import annotations

import os
import select

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


def _write_all(fd: int, *parts) -> bool:
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


def relay(read_fd: int, log_fd: int, prefix: bytes, out_fd: int = 1,
          partial_delay: float = 0.1, pipe_size: int = PIPE_SIZE, on_first=None,
          log_lines: bool = False, to_console: bool = True) -> None:
    """Copy ``read_fd`` to ``log_fd`` verbatim and to ``out_fd`` with ``prefix`` on each line;
    ``on_first()`` once the first chunk is in the log (the event record's first output);
    ``log_lines``, ``to_console``: torchrun's ``--redirects 1``/``2`` (:func:`_log_lines`).
    Per chunk (up to 1 MiB): one ``write`` to the log, one ``bytes.replace`` and one ``writev``
    to the console; only complete lines go to the console, so lines from different ranks never
    interleave mid-line in mpirun's output."""
    nl_prefix = b"\n" + prefix
    at_line_start, pending = True, b""
    console = to_console
    held = b""      # log_lines: the partial last line not yet in the log
    grow_pipe(out_fd, pipe_size)
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
                _write_all(log_fd, chunk)
            if on_first is not None:
                on_first()
                on_first = None
            if not console:
                continue
            cut = chunk.rfind(b"\n")
            if cut < 0:
                pending += chunk
                if len(pending) >= READ_CHUNK:
                    console = _write_all(out_fd, prefix if at_line_start else b"", pending)
                    at_line_start, pending = False, b""
                continue
            body = chunk.replace(b"\n", nl_prefix)
            end = len(body) - (len(chunk) - cut - 1) - len(prefix)  # just past the last \n
            head = prefix if at_line_start else b""
            console = _write_all(out_fd, head, pending, memoryview(body)[:end])
            pending = chunk[cut + 1:]
            at_line_start = True
        _write_all(log_fd, held)
        if console and (pending or not at_line_start):   # end the rank's last line
            _write_all(out_fd, prefix if at_line_start and pending else b"", pending, b"\n")
    finally:
        os.close(read_fd)
        os.close(log_fd)


def relay_threads(role: str, prefix: bytes, read_fd: int, hid_r: "int | None", log_fd: int,
                  out_fd: int, pipe_size: int, first=None) -> tuple:
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
