"""How mpilaunch's own processes end: PR_SET_PDEATHSIG (the kernel signals a process when its
parent dies) and :func:`exit_now`.

Used by the launcher (mpirun is told to stop if mpilaunch is killed) and by the rank adapter
(itself, and its children). Look ``prctl`` up *before* forking: a pre-exec hook should not
load libraries.

``prctl`` is bound through ``_ctypes`` itself, as ``ctypes.CDLL`` does it, without the
``ctypes`` package (its import, with ``struct`` and its type classes, every rank's adapter
would pay: docs/ARCHITECTURE.md, start-up); ``ctypes`` is the fallback if that binding fails.
"""
import _signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)

TYPE_CHECKING = False   # no typing at run time: every rank imports this module
if TYPE_CHECKING:
    import _ctypes

PR_SET_PDEATHSIG = 1
# What the main thread must get: the teardown signals (its handlers run there) and SIGCHLD
# (its waits end on it). A helper thread is started with them blocked (SignalsBlocked): it
# inherits the mask, so the kernel delivers them to the main thread.
MAIN_THREAD_SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP, _signal.SIGCHLD)


class SignalsBlocked:
    """``with SignalsBlocked(): thread.start()``: :data:`MAIN_THREAD_SIGNALS` blocked in this
    thread while helper threads are started (the adapter's, whose main thread waits on its
    children and handles the teardown signals), then the mask as it was."""

    def __enter__(self) -> None:
        self.old = _signal.pthread_sigmask(_signal.SIG_BLOCK, MAIN_THREAD_SIGNALS)

    def __exit__(self, *exc: object) -> None:
        _signal.pthread_sigmask(_signal.SIG_SETMASK, self.old)
_prctl = None   # libc's prctl, once bound: a ctypes function (_ctypes.CFuncPtr)


def _bind() -> "_ctypes.CFuncPtr":
    import _ctypes

    class _Int(_ctypes._SimpleCData):
        _type_ = "i"

    class _Fn(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Int

    class _Libc:
        # the process itself (libc), RTLD_LOCAL as CDLL; None is what CDLL(None) passes too
        _handle = _ctypes.dlopen(None, 0)   # type: ignore[arg-type]

    return _Fn(("prctl", _Libc()))   # type: ignore[arg-type]  # a CDLL: only _handle is read


def prctl() -> "_ctypes.CFuncPtr":
    """libc's ``prctl`` (bound once)."""
    global _prctl
    if _prctl is None:
        try:
            _prctl = _bind()
        except Exception:   # an interpreter whose _ctypes differs: the public way
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
    return _prctl


def set_parent_death_signal(sig: int) -> None:
    prctl()(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def exit_now(code: int) -> None:
    """Flush Python's stdout/stderr and exit with ``code`` without the interpreter's
    finalisation, which frees every module and object one by one (in the launcher after the
    job's end and in every rank: docs/ARCHITECTURE.md, start-up).
    For a process whose threads are daemons, which registers no atexit hook and writes its own
    files unbuffered (the launcher, the rank adapter)."""
    import os
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:   # None: the fd was closed when Python started
                stream.flush()
        except (OSError, ValueError):   # a closed or broken pipe: nothing more can reach it
            pass
    os._exit(code)
