"""Where is the scheduler, and which node am I on: the ranks agree (through MPI if needed).

MPI (mpi4py, imported lazily) is used only when the environment alone cannot answer: the
ranks span nodes (node index or rank 0's address unknown), ``--master-port 0`` was asked
(rank 0 picks, everyone must learn it), or the starter (the MPI program that started the ranks) gave only ``PMIX_RANK``.

With MPI, every rank allgathers ``(hostname, non-loopback IPv4s then global IPv6s, node
leader, local rank, local size)``. A node is a hostname, checked against the starter's local ranks; the node
leader (lowest world rank in the ``COMM_TYPE_SHARED`` communicator) only separates two
hosts that share a hostname (see :func:`nodes_of`). Node index = order of nodes by their
lowest rank, so node 0 is rank 0's node. Rank 0 then chooses the scheduler address and port and broadcasts the
result (or its error), and **every rank calls ``MPI_Finalize`` at once**: a rank that
exits after ``MPI_Init`` without finalising would otherwise make the job wait ~62 s
(docs/OPENMPI_FACTS.md). Measured on Open MPI 5.0.11 and 4.1.4: after Finalize, one rank exiting
non-zero still ends a 4-rank job in 2-3 s.

Scheduler address (rank 0): ``--master-addr`` resolved (IPv4 first; a name with only IPv6
addresses, or an IPv6 literal, gives IPv6); else ``127.0.0.1`` when all ranks are on one node;
else the local address the kernel would use to reach another node (UDP ``connect`` +
``getsockname``, nothing is sent; on IPv6-only hosts an IPv6 address), never loopback when ranks
span nodes. The address is given bare (MindSpore 2.10 reads ``MS_SCHED_HOST`` only so, measured:
a bracketed literal fails "Parse ip failed"); a URL built from it brackets it (net.url_host).
Port: rank 0 checks it is free (bind test with ``SO_REUSEADDR`` on the wildcard address,
so a port only in ``TIME_WAIT`` from the previous run is not refused); port 0 picks a free
one. A taken port, or a ``--master-addr`` that is not an address of rank 0's host, is a
:class:`UsageError` (exit 2) on rank 0; the other ranks exit 2 too (:class:`PeerFailed`).

MPI start-up: unless the user set ``OMPI_MCA_btl`` to an inclusion list, ``ofi`` is
excluded from the BTLs *of the adapter's own process* before mpi4py loads (Open MPI 5's
libfabric probe; what it costs: docs/ARCHITECTURE.md, start-up). The workers' environment is
taken before this change and never sees it.
"""
from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import (Any, Callable, List, Mapping, MutableMapping, NamedTuple, Optional,
                        Sequence, Tuple)

    # The checker's view of the records below; at run time they are namedtuples (a test holds
    # the two to the same fields).
    class Agreement(NamedTuple):
        info: RankInfo; sched_addr: str; sched_port: int; used_mpi: bool   # noqa: E702

    class Peer(NamedTuple):
        rank: int; hostname: str; ipv4s: Tuple[str, ...]; leader: int   # noqa: E702
        local_rank: int; local_size: int   # noqa: E702

from mpilaunch.errors import UsageError
# The network look-ups are the launcher's too: one module for both (mpilaunch/net.py).
from mpilaunch.net import (LOOPBACK, MASTER_ADDR_FIX, check_port, is_loopback, local_ipv4s,
                           local_ipv6s, resolve_ipv4, route_interface, route_source)
from mpilaunch.rank.identity import RankInfo


class PeerFailed(Exception):
    """Rank 0 failed during the agreement; this rank must exit (status 2) without starting."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


# info: RankInfo, complete, with node_index/num_nodes when MPI was used
if not TYPE_CHECKING:
    Agreement = namedtuple("Agreement", "info sched_addr sched_port used_mpi")


# ---------------------------------------------------------------- addresses (impure)

def local_ip(sched_addr: str) -> str:
    """This host's address for ``{ip}`` in log names: the source address towards the
    scheduler, else the first non-loopback IPv4 (IPv6 on an IPv6-only host), else ``127.0.0.1``."""
    if not is_loopback(sched_addr):
        src = route_source(sched_addr)
        if src:
            return src
    ips = local_ipv4s() or local_ipv6s()
    return ips[0] if ips else LOOPBACK


def interface_towards(addr: str) -> Optional[str]:
    """Name of the local interface towards ``addr``: the main routing table's route to it
    (net.route_interface), else the interface holding the address the kernel uses to reach
    it. None for loopback or when no interface holds it."""
    name = None if is_loopback(addr) else route_interface(addr)
    if name is not None:
        return None if name == "lo" else name
    from mpilaunch import netif

    src = local_ip(addr)
    for name, family, address in netif.addresses():
        if family in (netif.AF_INET, netif.AF_INET6) and address == src:
            return None if name == "lo" else name
    return None


def master_address(name: str, spans_nodes: bool, flag: str = "--master-addr") -> str:
    """Rank 0's scheduler address for ``--master-addr NAME``, the rule the launcher checks
    with (rankcheck.py) and every rank applies: the resolver's first IPv4 answer, or IPv6 for
    an IPv6-only name (:func:`mpilaunch.net.resolve_ipv4`), never a loopback address when the ranks span
    several hosts. UsageError naming ``flag`` otherwise."""
    addr = resolve_ipv4(name, flag)
    _refuse_loopback(addr, spans_nodes, name, flag)
    return addr


def _refuse_loopback(addr: str, spans_nodes: bool, given: str, flag: str) -> None:
    if spans_nodes and is_loopback(addr):
        said = f"resolves to {addr}, a loopback address" if given != addr else "a loopback address"
        raise UsageError(f"{flag}={given!r}: {said}, but the ranks span several hosts; "
                         f"{MASTER_ADDR_FIX}")


# ---------------------------------------------------------------- pure decisions

# leader: lowest world rank on the same node
if not TYPE_CHECKING:
    Peer = namedtuple("Peer", "rank hostname ipv4s leader local_rank local_size")


def _group(peers: Sequence[Peer], key: Callable[[Peer], Any]) -> List[List[Peer]]:
    groups: dict = {}
    for p in sorted(peers, key=lambda p: p.rank):
        groups.setdefault(key(p), []).append(p)
    return sorted(groups.values(), key=lambda g: g[0].rank)


def _consistent(nodes: List[List[Peer]]) -> bool:
    """Each node's local ranks are exactly 0..n-1 and every member says local size n."""
    return all(sorted(p.local_rank for p in n) == list(range(len(n)))
               and all(p.local_size == len(n) for p in n) for n in nodes)


def nodes_of(peers: Sequence[Peer]) -> List[List[Peer]]:
    """Peers grouped by node, nodes ordered by their lowest rank, ranks sorted in each.

    A node is a hostname, checked against the starter's local ranks/sizes; if two nodes
    share a hostname, the MPI shared-memory leader tells them apart. (The leader alone is
    not trusted: mpi4py's Open MPI 5 library under Open MPI 4.1's mpirun put two ranks of
    one remote host in different shared-memory communicators.)
    """
    for key in (lambda p: p.hostname, lambda p: (p.hostname, p.leader)):
        nodes = _group(peers, key)
        if _consistent(nodes):
            return nodes
    raise UsageError(
        "cannot tell which ranks share a node: hostnames and the starter's local ranks "
        "disagree (" + "; ".join(f"rank {p.rank} on {p.hostname} local {p.local_rank}/"
                                 f"{p.local_size}" for p in sorted(peers, key=lambda p: p.rank))
        + ")")


def complete_info(info: RankInfo, peers: Sequence[Peer]) -> RankInfo:
    """Fill node index/count (and, for PMIx-only, size/local rank/local size) from peers."""
    nodes = nodes_of(peers)
    me = next(p for p in peers if p.rank == info.rank)
    index = next(i for i, n in enumerate(nodes) if me in n)
    return info._replace(
        node_index=index, num_nodes=len(nodes),
        size=len(peers) if info.size is None else info.size,
        local_rank=me.local_rank if info.local_rank is None else info.local_rank,
        local_size=me.local_size if info.local_size is None else info.local_size)


def choose_sched_addr(master_addr: Optional[str], spans_nodes: bool, own_ipv4s: Sequence[str],
                      other_nodes_ipv4s: Sequence[Sequence[str]],
                      route: Callable[[str], Optional[str]], hostname: str = "") -> str:
    """Rank 0's choice of scheduler address (``master_addr`` already resolved to IPv4)."""
    if master_addr:
        _refuse_loopback(master_addr, spans_nodes, master_addr, "--master-addr")
        return master_addr
    if not spans_nodes:
        return LOOPBACK
    own = set(own_ipv4s)
    for ips in other_nodes_ipv4s:
        for ip in ips:
            if ip in own:      # shared addresses (docker0 and the like) route locally
                continue
            src = route(ip)
            if src and not is_loopback(src):
                return src
    if own_ipv4s:
        return own_ipv4s[0]
    raise UsageError(
        f"rank 0's host {hostname} has no non-loopback IPv4 or global IPv6 address for the "
        f"scheduler; pass --master-addr")


def mca_tweak(env: Mapping[str, str]) -> Optional[str]:
    """New value for ``OMPI_MCA_btl`` that excludes ofi, or None to leave it alone."""
    cur = env.get("OMPI_MCA_btl")
    if cur is None or not cur.strip():
        return "^ofi"
    cur = cur.strip()
    if cur.startswith("^"):
        names = [n.strip() for n in cur[1:].split(",") if n.strip()]
        if "ofi" not in names:
            return "^" + ",".join(names + ["ofi"])
    return None


def node_from_plan(info: RankInfo, expect: Tuple[int, str, Tuple[Tuple[str, int], ...]]) -> RankInfo:
    """Node index and count from the launcher's plan (``--expect-ranks``, parsed by
    ``rank/span.py``) in ``exact`` mode (hostfile slots filled in order), when it agrees with
    what the starter says here (world size, this host's rank count, local rank = rank -
    the host's first rank): ranks spanning hosts then need no MPI agreement (MPI_Init in every
    rank) only to learn their node index. Anything else (other modes, a mismatch): ``info`` unchanged."""
    if expect is None or not info.complete or info.node_index is not None:
        return info
    n, mode, table = expect
    if mode != "exact" or n != info.size or not table:
        return info
    total = 0
    for index, (_, count) in enumerate(table):
        if info.rank < total + count:
            if count == info.local_size and info.rank - total == info.local_rank:
                return info._replace(node_index=index, num_nodes=len(table))
            return info
        total += count
    return info


def needs_mpi(info: RankInfo, master_addr: Optional[str], master_port: int) -> bool:
    if not info.complete or master_port == 0:
        return True
    if info.single_node:
        return False
    return info.node_index is None or not master_addr


# ---------------------------------------------------------------- the agreement

def agree(info: RankInfo, master_addr: Optional[str], master_port: int,
          environ: MutableMapping[str, str] = os.environ) -> Agreement:
    """Agree on the scheduler address/port (and node index). Raises UsageError on rank 0,
    PeerFailed on the others when rank 0 failed."""
    if not needs_mpi(info, master_addr, master_port):
        addr = (master_address(master_addr, not info.single_node) if master_addr
                else LOOPBACK)
        port = master_port
        if info.rank == 0:
            port = check_port(addr, master_port, info.hostname)
        return Agreement(info, addr, port, used_mpi=False)
    return _agree_mpi(info, master_addr, master_port, environ)


def _agree_mpi(info: RankInfo, master_addr: Optional[str], master_port: int,
               environ: MutableMapping[str, str]) -> Agreement:
    tweak = mca_tweak(environ)
    if tweak is not None:
        environ["OMPI_MCA_btl"] = tweak
    try:
        import mpi4py

        mpi4py.rc.finalize = False   # we finalise ourselves, right after the agreement
        from mpi4py import MPI
    except (ImportError, RuntimeError) as exc:
        why = ("the ranks span several nodes" if info.complete and not info.single_node
               else "--master-port 0 was asked" if master_port == 0
               else f"the starter ({info.starter}) gives only the rank")
        raise UsageError(f"mpi4py is needed because {why}, but it cannot be loaded: "
                         f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None

    comm = MPI.COMM_WORLD
    try:
        rank, size = comm.Get_rank(), comm.Get_size()
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
        leader = shared.allreduce(rank, op=MPI.MIN)
        # the starter's local rank/size when it gave them, else MPI's shared-memory view
        me = Peer(rank, info.hostname, tuple(local_ipv4s()) + tuple(local_ipv6s()), leader,
                  shared.Get_rank() if info.local_rank is None else info.local_rank,
                  shared.Get_size() if info.local_size is None else info.local_size)
        shared.Free()
        peers = [Peer(*p) for p in comm.allgather(tuple(me))]
        result: Tuple[str, Any, Any]   # ("ok", address, port) or ("error", why, None)
        if rank == 0:
            try:
                result = ("ok",) + _decide(info, rank, size, master_addr, master_port, peers)
            except UsageError as exc:
                result = ("error", str(exc), None)
        else:
            result = None  # type: ignore[assignment]
        result = comm.bcast(result, root=0)
    finally:
        MPI.Finalize()
    if result[0] != "ok":
        if rank == 0:
            raise UsageError(str(result[1]))
        raise PeerFailed(f"rank 0 failed: {result[1]}")
    if rank != info.rank or (info.size is not None and size != info.size):
        # mpi4py's libmpi is not the starter's MPI (MPI_Init became a singleton).
        raise UsageError(
            f"mpi4py's MPI sees rank {rank} of {size} but the starter ({info.starter}) says "
            f"rank {info.rank} of {info.size}: mpi4py is built for a different MPI "
            f"(set MPI4PY_LIBMPI or use the matching mpirun)")
    return Agreement(complete_info(info, peers), str(result[1]), int(result[2]), used_mpi=True)


def _decide(info: RankInfo, rank: int, size: int, master_addr: Optional[str],
            master_port: int, peers: Sequence[Peer]) -> Tuple[str, int]:
    if rank != info.rank or (info.size is not None and size != info.size):
        raise UsageError(
            f"mpi4py's MPI sees rank {rank} of {size} but the starter ({info.starter}) says "
            f"rank {info.rank} of {info.size}: mpi4py is built for a different MPI "
            f"(set MPI4PY_LIBMPI or use the matching mpirun)")
    nodes = nodes_of(peers)
    spans = len(nodes) > 1
    resolved = master_address(master_addr, spans) if master_addr else None
    me = next(p for p in peers if p.rank == rank)
    others = [[ip for p in node for ip in p.ipv4s] for node in nodes[1:]]
    addr = choose_sched_addr(resolved, spans, list(me.ipv4s), others, route_source,
                             info.hostname)
    port = check_port(addr, master_port, info.hostname)
    return addr, port
