"""The ways of starting ranks, one room each, behind one protocol (``base.Backend``):

    openmpi.py    Open MPI's mpirun, 4.x and 5.x dialects (+ its tune file)
    hydra.py      Hydra's mpiexec: MPICH, Intel MPI (+ hydra_report.py: its output, lost proxies)
    srun.py       Slurm's srun inside an allocation

:func:`select` picks the room for a launch config; ``supervise.starter.run_attempt`` supervises whichever it is.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from mpilaunch.backends.base import Backend
    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.config.mpi import MpiInfo


def for_mpi(info: MpiInfo) -> Backend[Any]:
    """The backend of a detected mpirun/mpiexec (``mpi.detect``)."""
    if info.hydra:
        from mpilaunch.backends.hydra import Hydra

        return Hydra(info)
    from mpilaunch.backends.openmpi import OpenMpi

    return OpenMpi(info)


def select(cfg: LaunchConfig, env: Mapping[str, str]) -> Backend[Any]:
    """``--launcher srun``: Slurm's srun; else the mpirun/mpiexec found (``--mpirun``, ...)."""
    if cfg.starter == "srun":
        from mpilaunch.backends.srun import Srun

        return Srun.detect(env)
    from mpilaunch.config import mpi

    return for_mpi(mpi.detect(cfg.mpirun, env))
