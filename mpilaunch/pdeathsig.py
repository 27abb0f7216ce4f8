"""PR_SET_PDEATHSIG: have the kernel signal a process when its parent dies.

Used by the launcher (mpirun is told to stop if mpilaunch is killed) and by the rank adapter
(itself, and its children). Look ``prctl`` up *before* forking: a pre-exec hook should not
load libraries.

``prctl`` is bound through ``_ctypes`` itself, as ``ctypes.CDLL`` does it, without the
``ctypes`` package (its import, with ``struct`` and its type classes, is ~3 ms of CPU that
every rank's adapter would pay); ``ctypes`` is the fallback if that binding fails.
"""
PR_SET_PDEATHSIG = 1
_prctl = None


def _bind():
    import _ctypes

    class _Int(_ctypes._SimpleCData):
        _type_ = "i"

    class _Fn(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
        _restype_ = _Int

    class _Libc:
        _handle = _ctypes.dlopen(None, 0)   # the process itself (libc), RTLD_LOCAL as CDLL

    return _Fn(("prctl", _Libc()))


def prctl():
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
