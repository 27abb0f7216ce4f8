"""Shared pytest set-up, and the one place fixtures are registered (their code lives in
tests/helpers/: fixtures_hosts.py for the namespace test hosts, slurm/fixtures.py for Slurm).

The rooms (launcher/, rank/, e2e/, multihost/, slurm/) hold only test modules, imported by
pytest's importlib mode (setup.cfg) so equal file names in two rooms do not collide; what
they share is imported from the ``helpers`` package, found through tests/ on sys.path."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Running as root: let every mpirun we start (directly or via mpilaunch) accept it.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

import pytest  # noqa: E402

from helpers import ports  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _fixed_ports_busy():
    """No test may need a fixed port free: the default --master_port (8118) is held busy for
    the whole session (helpers/ports.py), so a launch that leans on it fails here every time
    instead of on the day another job holds it. Give --master_port 0 or ports.free_port()."""
    with ports.held_busy():
        yield


# fixtures for multi-node tests (network namespaces + sshd, built by tests/helpers/hosts/)
from helpers.fixtures_hosts import *  # noqa: E402,F401,F403
from helpers.slurm.fixtures import *  # noqa: E402,F401,F403  (a real Slurm: tests/helpers/slurm/)
