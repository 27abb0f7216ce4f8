"""Shared pytest set-up. Fixtures for namespace test hosts live in tests/fixtures_hosts.py."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# Running as root: let every mpirun we start (directly or via mpilaunch) accept it.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

# fixtures for multi-node tests (network namespaces + sshd, built by tests/hosts/)
from fixtures_hosts import *  # noqa: E402,F401,F403
from slurm.fixtures import *  # noqa: E402,F401,F403  (a real Slurm: tests/slurm/)
