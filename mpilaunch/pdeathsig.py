"""PR_SET_PDEATHSIG: have the kernel signal a process when its parent dies.

Used by the launcher (mpirun is told to stop if mpilaunch is killed) and by the rank adapter
(itself, and its children). Look ``prctl`` up *before* forking: a pre-exec hook should not
load libraries.
"""
import ctypes

PR_SET_PDEATHSIG = 1
_libc = None


def prctl():
    """libc's ``prctl`` (loaded once)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc.prctl


def set_parent_death_signal(sig: int) -> None:
    prctl()(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
