"""Pytest fixture ``slurm_cluster``: one real Slurm (controller + this machine as its one
node, 4 task slots), session-scoped, always torn down (finalizer and atexit), skipped when
Slurm is not installed (``bash scripts/setup_slurm.sh``)."""
import atexit

import pytest

from slurm.cluster import SlurmCluster, missing_prereqs

__all__ = ["slurm_cluster"]


@pytest.fixture(scope="session")
def slurm_cluster():
    why = missing_prereqs()
    if why:
        pytest.skip("no Slurm here: " + why)
    cluster = SlurmCluster(cpus=4, kill_wait=5)
    atexit.register(cluster.stop)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        atexit.unregister(cluster.stop)
