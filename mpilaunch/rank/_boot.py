"""Start the rank adapter without ``site`` processing (``python -S _boot.py ...``).

``site`` runs every ``.pth`` file of the interpreter at start-up; on some machines that is
most of Python's start time (docs/ARCHITECTURE.md, start-up), and every rank pays
it before the user's script even starts. The adapter needs only this package and the
site-packages directories (mpi4py, psutil), so it adds exactly those to ``sys.path``.
The worker and the scheduler are started normally, with full ``site`` processing.
"""
import gc

gc.disable()   # no collections while the adapter's modules load (docs/ARCHITECTURE.md, start-up);
#                Supervisor.run enables it
import os  # noqa: E402
import sys  # noqa: E402

TYPE_CHECKING = False   # no typing at run time: every rank starts here
if TYPE_CHECKING:
    from typing import Iterator, Optional, Tuple


def _venv() -> "Tuple[Optional[str], bool]":
    """(venv dir, include-system-site-packages) when this interpreter is a venv's. Under -S,
    ``sys.prefix`` stays the base installation: the venv is found as ``site`` would find it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))
    cfg = os.path.join(root, "pyvenv.cfg")
    if not os.path.isfile(cfg):
        return None, True
    include = False
    with open(cfg, encoding="utf-8") as fh:
        for line in fh:
            key, _, value = line.partition("=")
            if key.strip().lower() == "include-system-site-packages":
                include = value.strip().lower() == "true"
    return root, include


def _paths() -> "Iterator[str]":
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.dirname(os.path.dirname(here))     # the directory holding the mpilaunch package
    import site
    venv, include_base = _venv()
    if venv is not None:
        for path in site.getsitepackages([venv]):
            yield path
    if include_base:
        for path in site.getsitepackages():
            yield path
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if user and os.path.isdir(user):
        yield user


if __name__ == "__main__":
    sys.path[1:1] = [p for p in _paths() if p not in sys.path]
    _root = _venv()[0]
    if _root is not None:   # as site does for a venv: mpi4py finds the venv's libmpi via sys.prefix
        sys.prefix = sys.exec_prefix = _root   # (MPICH / Intel MPI wheels; else: singleton MPI)
    from mpilaunch.rank.__main__ import leave, main

    leave(main())
