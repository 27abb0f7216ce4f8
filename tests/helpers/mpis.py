"""The MPI installs the tests can launch with, in one place (share these, do not copy them).

Each is a :class:`Mpi`: the interpreter that runs mpilaunch (a Hydra MPI lives in its own venv
with its own mpi4py: scripts/setup_hydra.sh) and the launcher. ``ALL`` / ``HYDRA`` are
``pytest.param`` lists that skip, with the reason, when an install is missing; ``MPIRUNS`` is
the same for the two Open MPIs, as the mpirun path (for tests that run this interpreter).
"""
import os
import sys
from collections import namedtuple

import pytest

VENVS = "/opt/mpilaunch"
MPICH_VENV = os.environ.get("MPILAUNCH_MPICH_VENV", os.path.join(VENVS, "mpich-venv"))
IMPI_VENV = os.environ.get("MPILAUNCH_IMPI_VENV", os.path.join(VENVS, "impi-venv"))


class Mpi(namedtuple("Mpi", "id python mpirun")):
    """id: 'ompi5' | 'ompi4' | 'mpich' | 'impi'; python: runs mpilaunch and the ranks;
    mpirun: what --mpirun gets."""

    __slots__ = ()

    @property
    def hydra(self):
        return self.id in ("mpich", "impi")

    def missing(self):
        """Why this install cannot be used here, or None."""
        for path in (self.python, self.mpirun):
            if not os.access(path, os.X_OK):
                setup = " (bash scripts/setup_hydra.sh)" if self.hydra else ""
                return f"{self.id}: {path} not installed{setup}"
        return None


OMPI5 = Mpi("ompi5", sys.executable, os.path.join(os.path.dirname(sys.executable), "mpirun"))
OMPI4 = Mpi("ompi4", sys.executable, "/usr/bin/mpirun")
# The venv's `mpirun` on purpose: Intel's is a shell wrapper that mpilaunch must replace by the
# mpiexec.hydra beside it.
MPICH = Mpi("mpich", os.path.join(MPICH_VENV, "bin", "python"), os.path.join(MPICH_VENV, "bin", "mpirun"))
IMPI = Mpi("impi", os.path.join(IMPI_VENV, "bin", "python"), os.path.join(IMPI_VENV, "bin", "mpirun"))


def params(mpis):
    return [pytest.param(m, id=m.id, marks=pytest.mark.skipif(m.missing() is not None, reason=str(m.missing())))
            for m in mpis]


ALL = params([OMPI5, OMPI4, MPICH, IMPI])
HYDRA = params([MPICH, IMPI])


def mpilaunch_argv(mpi, *args):
    """``mpilaunch --mpirun MPIRUN ARGS`` run by that install's interpreter."""
    return [mpi.python, "-m", "mpilaunch", "--mpirun", mpi.mpirun, *args]


OMPI5_MPIRUN = OMPI5.mpirun
OMPI4_MPIRUN = OMPI4.mpirun
# The Open MPI launchers by path (ids ompi5, ompi4), for tests that run this interpreter.
MPIRUNS = [pytest.param(m.mpirun, id=m.id, marks=pytest.mark.skipif(m.missing() is not None, reason=str(m.missing())))
           for m in (OMPI5, OMPI4)]
