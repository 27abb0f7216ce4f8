"""Pytest fixtures for a real Slurm, always torn down (finalizer and atexit), skipped when
Slurm is not installed (``bash scripts/setup_slurm.sh``):

* ``slurm_cluster``: controller + this machine as its one node (4 task slots), session-scoped.
* ``slurm_nodes``: controller here + one slurmd in each of the first 2 namespace test hosts
  (2 task slots each; multinode.py), built on the session's ``testhosts``; started once per
  session and started again if a test host was crashed under it (fault tests kill every
  process inside a host)."""
import atexit

import pytest

from .cluster import SlurmCluster, missing_prereqs

__all__ = ["slurm_cluster", "slurm_nodes", "slurm_nodes_holder"]


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


@pytest.fixture(scope="session")
def slurm_nodes_holder(request):
    why = missing_prereqs()
    if why:
        pytest.skip("no Slurm here: " + why)
    held = []

    def stop():
        while held:
            held.pop().stop()

    # atexit runs before the test hosts' own (registered earlier): slurmd goes first
    atexit.register(stop)
    request.addfinalizer(lambda: (stop(), atexit.unregister(stop)))
    return held


@pytest.fixture
def slurm_nodes(slurm_nodes_holder, testhosts):
    from .multinode import SlurmNodes

    held = slurm_nodes_holder
    if held and not held[0].healthy():
        held.pop().stop()
    if not held:
        cluster = SlurmNodes(testhosts, n=2, cpus=2, kill_wait=5)
        cluster.start(timeout=60)   # a failed start stops itself: never held, the next test retries
        held.append(cluster)
    return held[0]
