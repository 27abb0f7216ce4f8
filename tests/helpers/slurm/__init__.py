"""A real Slurm for tests: ``munged``, ``slurmctld`` and ``slurmd`` started by hand (no
systemd), see cluster.py; the pytest fixture is in fixtures.py (registered by
tests/conftest.py); worker.py is the program the test jobs run in every rank, jobs.py what
the Slurm tests share about it."""
from .cluster import SlurmCluster, missing_prereqs  # noqa: F401
