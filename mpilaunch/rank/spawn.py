"""Start a child process with fork + exec, without the ``subprocess`` module.

Every rank's adapter starts its worker (and rank 0 its scheduler); ``subprocess`` and what it
imports (``locale``, ``re``, ``selectors``, ``contextlib``, ``signal``'s enums) cost a few ms
of CPU per rank, paid on every host, and on a machine that starts many ranks at once they add
up (docs/ARCHITECTURE.md, start-up). What is needed here is small: the child's standard
streams, a set of file descriptors to keep (everything else closed, as ``close_fds=True``), a
pre-exec hook (PR_SET_PDEATHSIG, the signal mask, CPU affinity), an exec error reported to the
parent as ``OSError`` with its errno, SIGPIPE and SIGXFSZ back to their defaults (Popen's
``restore_signals``), and a ``wait``/``poll``/``send_signal`` with ``subprocess.Popen``'s
meaning of ``returncode`` (``-N`` for death by signal N).

The child runs only C-level ``os`` calls and the hook between fork and exec, as ``Popen`` with
a ``preexec_fn`` does, and never imports: a module another thread was importing at the fork
stays locked in the child for ever (``os.execvpe`` imports ``warnings`` to read PATH, and the
control thread's ``hmac`` imports it too: a worker that never started, once in a full test
run). So the program is looked up in the parent and the child only tries ``os.execve``.
"""
from __future__ import annotations

import _signal
import errno
import os
import sys

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Iterable, List, Mapping, Optional, Sequence

DEVNULL = -3   # stdin: /dev/null
_RESTORED = tuple(getattr(_signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(_signal, n))


class Child:
    """A started child: ``pid``, ``returncode`` (None while running)."""

    def __init__(self, pid: int, argv: List[str]) -> None:
        self.pid = pid
        self.args = argv
        self.returncode: Optional[int] = None

    def _status(self, status: int) -> None:
        self.returncode = os.waitstatus_to_exitcode(status)

    def wait(self) -> int:
        """Block until the child exits (call from one thread only: it reaps it)."""
        while self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, 0)
            except ChildProcessError:   # reaped by someone else: its status is lost
                self.returncode = 255
                break
            if pid == self.pid:
                self._status(status)
        return self.returncode

    def poll(self) -> Optional[int]:
        """The return code once the child has been reaped by :meth:`wait`, else None. (Never
        reaps: the waiting thread does, so a pid is not signalled after its reuse.)"""
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(_signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(_signal.SIGKILL)


def _open_fds() -> List[int]:
    try:
        return [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


def _candidates(file: str, env: Optional[Mapping[str, str]]) -> List[str]:
    """Where ``execvpe`` would look for ``file``: itself when it has a directory part, else
    each entry of ``env``'s PATH (``os.defpath`` without one), in order."""
    if os.path.dirname(file):
        return [file]
    path = env.get("PATH") if env is not None else None
    return [os.path.join(d, file) for d in (os.defpath if path is None else path).split(os.pathsep)]


def _fork() -> int:
    if sys.version_info >= (3, 12):   # os.fork warns (DeprecationWarning) when threads run
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return os.fork()
    return os.fork()


def start(argv: Sequence[str], env: Mapping[str, str], stdin: Optional[int] = None,
          stdout: Optional[int] = None, pass_fds: Iterable[int] = (),
          preexec: Optional[Callable[[], None]] = None, stderr: Optional[int] = None) -> Child:
    """fork + exec of ``argv`` with ``env`` (``argv[0]`` looked up in ``env``'s PATH as
    ``execvpe`` does, but before the fork).
    ``stdin``: None (inherit) or :data:`DEVNULL`; ``stdout``: an fd for the child's stdout and
    stderr (``stderr``: an fd of its own for stderr), or None (inherit both); ``pass_fds``: fds the child keeps (inheritable); every
    other fd above 2 is closed. OSError (with the exec's errno) when it could not start."""
    argv = list(argv)
    tries = _candidates(argv[0], env)
    keep = sorted(set(int(fd) for fd in pass_fds))
    err_r, err_w = os.pipe()   # both O_CLOEXEC: the write end closes at a successful exec
    try:
        pid = _fork()
    except BaseException:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:   # the child: os calls only, then exec or _exit
        code = 0
        try:
            os.close(err_r)
            _prepare_child(stdin, stdout, keep, err_w, preexec, stderr)
            code = _exec(tries, argv, env)
        except OSError as exc:
            code = exc.errno or 0
        except BaseException:
            code = 0
        try:
            os.write(err_w, str(code).encode())
        finally:
            os._exit(255)
    os.close(err_w)
    try:
        got = _read_all(err_r)
    finally:
        os.close(err_r)
    if got:   # the exec did not happen: reap the child, raise its reason
        os.waitpid(pid, 0)
        code = int(got or b"0")
        if code:
            raise OSError(code, os.strerror(code), argv[0])
        raise OSError(f"the pre-exec step failed for {argv[0]!r}")
    return Child(pid, argv)


def _prepare_child(stdin: Optional[int], stdout: Optional[int], keep: Sequence[int], err_w: int,
                   preexec: Optional[Callable[[], None]], stderr: Optional[int] = None) -> None:
    """In the child, before the exec: signals as Popen leaves them, the pre-exec hook, the
    standard streams, and every fd closed but ``keep`` (and ``err_w``, closed by the exec)."""
    for sig in _RESTORED:   # as Popen's restore_signals: Python ignores SIGPIPE/SIGXFSZ
        _signal.signal(sig, _signal.SIG_DFL)   # itself, and exec would keep them ignored
    if preexec is not None:
        preexec()
    if stdin == DEVNULL:
        fd = os.open(os.devnull, os.O_RDONLY)
        if fd != 0:
            os.dup2(fd, 0)
            os.close(fd)
    if stdout is not None:
        if stdout != 1:
            os.dup2(stdout, 1)
        os.dup2(1 if stderr is None else stderr, 2)
    for fd in keep:
        os.set_inheritable(fd, True)
    for fd in _open_fds():
        if fd > 2 and fd != err_w and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _exec(tries: Sequence[str], argv: List[str], env: Mapping[str, str]) -> int:
    """In the child: exec the first of ``tries`` that can be; returns only when none could,
    with the errno ``execvpe`` would raise (the first error other than "not there" wins)."""
    first = last = None
    for path in tries:
        try:
            os.execve(path, argv, env)
        except OSError as exc:
            last = exc
            if first is None and exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                first = exc
    failed = first or last
    return (failed.errno or 0) if failed is not None else errno.ENOENT


def _read_all(fd: int) -> bytes:
    got = b""
    while True:
        part = os.read(fd, 64)
        if not part:
            return got
        got += part
