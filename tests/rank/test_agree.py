"""The pure decisions of the agreement, and rank 0's port check on real sockets."""
import socket

import pytest

from mpilaunch.errors import UsageError
from mpilaunch.rank.agree import (Peer, check_port, choose_sched_addr, complete_info,
                                  mca_tweak, needs_mpi, nodes_of, resolve_ipv4)
from mpilaunch.rank.identity import read_identity

from helpers.rankenvs import OMPI5, OMPI_2NODES, PMIX_ONLY

PORT = 28190  # tests of this file use 28190-28199


def peers_two_nodes():
    # map-by node: ranks 0,2 on node a; 1,3 on node b
    return [Peer(0, "a", ("10.0.0.1",), 0, 0, 2), Peer(1, "b", ("10.0.0.2",), 1, 0, 2),
            Peer(2, "a", ("10.0.0.1",), 0, 1, 2), Peer(3, "b", ("10.0.0.2",), 1, 1, 2)]


def test_nodes_ordered_by_lowest_rank():
    nodes = nodes_of(peers_two_nodes())
    assert [[p.rank for p in n] for n in nodes] == [[0, 2], [1, 3]]


def test_nodes_by_hostname_even_if_shared_memory_leaders_disagree():
    # seen under Open MPI 4.1's mpirun with mpi4py's Open MPI 5 library: ranks 2 and 3 of
    # host b each alone in their COMM_TYPE_SHARED communicator
    peers = [Peer(0, "a", (), 0, 0, 2), Peer(1, "a", (), 0, 1, 2),
             Peer(2, "b", (), 2, 0, 2), Peer(3, "b", (), 3, 1, 2)]
    assert [[p.rank for p in n] for n in nodes_of(peers)] == [[0, 1], [2, 3]]


def test_same_hostname_on_two_nodes_split_by_leader():
    peers = [Peer(0, "dup", (), 0, 0, 2), Peer(1, "dup", (), 0, 1, 2),
             Peer(2, "dup", (), 2, 0, 2), Peer(3, "dup", (), 2, 1, 2)]
    assert [[p.rank for p in n] for n in nodes_of(peers)] == [[0, 1], [2, 3]]


def test_inconsistent_nodes_are_a_usage_error():
    peers = [Peer(0, "a", (), 0, 0, 2), Peer(1, "a", (), 1, 0, 2)]
    with pytest.raises(UsageError, match="cannot tell which ranks share a node"):
        nodes_of(peers)


def test_complete_info_sets_node_index():
    info = read_identity(OMPI_2NODES, "b")          # rank 3
    done = complete_info(info, peers_two_nodes())
    assert (done.node_index, done.num_nodes, done.local_rank, done.local_size) == (1, 2, 1, 2)


def test_complete_info_fills_pmix_only():
    info = read_identity(PMIX_ONLY, "a")            # rank 2
    done = complete_info(info, peers_two_nodes())
    assert (done.size, done.local_rank, done.local_size, done.node_index) == (4, 1, 2, 0)
    assert done.complete


def test_address_single_node_is_loopback():
    assert choose_sched_addr(None, False, ["10.0.0.1"], [], lambda ip: None) == "127.0.0.1"


def test_address_master_addr_wins():
    assert choose_sched_addr("10.9.9.9", True, ["10.0.0.1"], [["10.0.0.2"]],
                             lambda ip: "10.0.0.1") == "10.9.9.9"


def test_address_loopback_master_addr_across_nodes_is_an_error():
    with pytest.raises(UsageError, match="--master-addr"):
        choose_sched_addr("127.0.0.1", True, [], [["10.0.0.2"]], lambda ip: None)


def test_address_multi_node_uses_route_and_skips_shared_addresses():
    routes = {"172.17.0.1": "172.17.0.1", "10.0.0.2": "10.0.0.1"}
    seen = []

    def route(ip):
        seen.append(ip)
        return routes.get(ip)
    # docker0's 172.17.0.1 exists on both hosts: it routes locally and must be skipped
    addr = choose_sched_addr(None, True, ["172.17.0.1", "10.0.0.1"],
                             [["172.17.0.1", "10.0.0.2"]], route)
    assert addr == "10.0.0.1" and seen == ["10.0.0.2"]


def test_address_multi_node_never_loopback():
    addr = choose_sched_addr(None, True, ["10.0.0.1"], [["10.0.0.2"]], lambda ip: "127.0.0.1")
    assert addr == "10.0.0.1"
    with pytest.raises(UsageError, match="--master-addr"):
        choose_sched_addr(None, True, [], [["10.0.0.2"]], lambda ip: None)


def test_resolve_ipv4(monkeypatch):
    assert resolve_ipv4("127.0.0.1") == "127.0.0.1"
    assert resolve_ipv4("localhost").startswith("127.")
    import socket

    def no_such_host(name, *args, **kwargs):  # never ask a real resolver from a test
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)   # agree imports socket lazily
    with pytest.raises(UsageError, match="--master-addr"):
        resolve_ipv4("no-such-host.invalid")


@pytest.mark.parametrize("env, expected", [
    ({}, "^ofi"), ({"OMPI_MCA_btl": ""}, "^ofi"), ({"OMPI_MCA_btl": "^openib"}, "^openib,ofi"),
    ({"OMPI_MCA_btl": "^ofi,openib"}, None), ({"OMPI_MCA_btl": "self,tcp"}, None),
])
def test_mca_tweak(env, expected):
    assert mca_tweak(env) == expected


def test_needs_mpi():
    single = read_identity(OMPI5, "vm")
    multi = read_identity(OMPI_2NODES, "b")
    assert not needs_mpi(single, None, 8118)
    assert needs_mpi(single, None, 0)
    assert needs_mpi(multi, "10.0.0.1", 8118)        # node index unknown
    assert needs_mpi(read_identity(PMIX_ONLY, "a"), "10.0.0.1", 8118)


def test_check_port_free_taken_and_zero():
    assert check_port("127.0.0.1", PORT, "h") == PORT
    s = socket.socket()
    s.bind(("127.0.0.1", PORT + 1))
    s.listen()
    try:
        with pytest.raises(UsageError) as err:
            check_port("127.0.0.1", PORT + 1, "hostA")
        assert f"--master-port {PORT + 1} is already in use on host hostA" in str(err.value)
    finally:
        s.close()
    picked = check_port("127.0.0.1", 0, "h")
    assert 0 < picked < 65536


def test_check_port_not_local_master_addr():
    with pytest.raises(UsageError, match="not an address of rank 0's host"):
        check_port("198.51.100.77", PORT + 2, "h")    # TEST-NET-2: not local


def test_ipv6_only_hosts_choose_an_ipv6_scheduler_address():
    routes = {"fd00::12": "fd00::11"}
    assert choose_sched_addr(None, True, ["fd00::11"], [["fd00::12"]], routes.get) == "fd00::11"
    # dual stack: the IPv4 addresses come first in every peer's list, as before
    both = {"10.0.0.2": "10.0.0.1", "fd00::12": "fd00::11"}
    assert choose_sched_addr(None, True, ["10.0.0.1", "fd00::11"], [["10.0.0.2", "fd00::12"]],
                             both.get) == "10.0.0.1"
    with pytest.raises(UsageError, match="no non-loopback IPv4 or global IPv6 address"):
        choose_sched_addr(None, True, [], [["fd00::12"]], lambda ip: None, "h1")
