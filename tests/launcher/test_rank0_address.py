"""The launcher decides rank 0's address for a multi-host job when it runs there and the
hosts are given by address (restart.rank0_address), so no adapter needs MPI_Init to learn it."""
from collections import namedtuple

from mpilaunch import hostfile as hf
from mpilaunch import restart
from mpilaunch.rank import agree

Cfg = namedtuple("Cfg", "hosts")


def test_address_towards_the_first_other_host():
    cfg = Cfg((hf.Host("localhost", 2), hf.Host("10.231.0.77", 2)))
    assert restart.rank0_address(cfg) == agree.route_source("10.231.0.77")


def test_names_are_left_to_the_ranks_agreement():
    # a name lookup could wait on DNS: the launcher never makes one for this
    assert restart.rank0_address(Cfg((hf.Host("localhost", 1), hf.Host("node-b", 1)))) is None


def test_single_host_needs_nothing():
    assert restart.rank0_address(Cfg((hf.Host("localhost", 4),))) is None
