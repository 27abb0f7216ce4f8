"""Who am I in the job: a :class:`RankInfo` read from the environment the starter
(mpirun, mpiexec, srun, prterun: the MPI program that starts the ranks) gives the rank.

Pure: :func:`read_identity` looks only at the mapping it is given. Sources, first match wins:

==========  =======================================================================
starter     variables
==========  =======================================================================
openmpi     ``OMPI_COMM_WORLD_RANK``, ``_SIZE``, ``_LOCAL_RANK``, ``_LOCAL_SIZE``
hydra       ``PMI_RANK``, ``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``
            (MPICH / Intel MPI; chosen when ``MPI_LOCALRANKID`` is set, or ``PMI_RANK``
            without ``SLURM_PROCID``)
slurm       ``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_LOCALID``, ``SLURM_NODEID``,
            ``SLURM_NNODES``, local size from ``SLURM_STEP_TASKS_PER_NODE`` /
            ``SLURM_TASKS_PER_NODE`` (``"2(x3),1"`` form) indexed by the node id
pmix        ``PMIX_RANK`` only: size, local rank/size and node index are unknown here
            and are filled in by the MPI agreement (:mod:`mpilaunch.rank.agree`)
==========  =======================================================================

Open MPI takes precedence because ``mpirun`` inside a Slurm allocation inherits the batch
step's stale ``SLURM_PROCID=0``. Open MPI's ``OMPI_COMM_WORLD_NODE_RANK`` is the rank
*within* the node, not a node index, and is ignored. Open MPI and Hydra never give a node
index: it is 0 when every rank is local (``local_size == size``), otherwise ``None`` (the
agreement computes it). A bad or missing value is a :class:`UsageError` naming the variable.
"""
from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

    class _RankInfo(NamedTuple):   # the checker's view; at run time the namedtuple below
        rank: int; size: Optional[int]; local_rank: Optional[int]   # noqa: E702
        local_size: Optional[int]; node_index: Optional[int]; num_nodes: Optional[int]   # noqa: E702
        hostname: str; starter: str   # noqa: E702
else:
    _RankInfo = namedtuple("RankInfo", "rank size local_rank local_size node_index num_nodes hostname starter")

from mpilaunch.errors import UsageError


class RankInfo(_RankInfo):
    """rank: int; size, local_rank, local_size, node_index, num_nodes: Optional[int];
    hostname: str; starter (whose variables these are): "openmpi" | "hydra" | "slurm" | "pmix".
    (A namedtuple, not a dataclass: docs/ARCHITECTURE.md, start-up.)"""

    __slots__ = ()

    @property
    def complete(self) -> bool:
        """Everything but the node index is known (the pmix-only case is not)."""
        return None not in (self.size, self.local_rank, self.local_size)

    @property
    def single_node(self) -> bool:
        return self.complete and self.local_size == self.size

    def local(self) -> Tuple[int, int]:
        """(local rank, local size) of a complete RankInfo (the agreed one)."""
        if self.local_rank is None or self.local_size is None:
            raise ValueError("the local rank and size are not known (an incomplete RankInfo)")
        return self.local_rank, self.local_size

    def with_nodes(self, node_index: int, num_nodes: int) -> "RankInfo":
        return self._replace(node_index=node_index, num_nodes=num_nodes)


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    raw = env.get(name)
    if raw is None:
        raise UsageError(f"environment variable {name} is not set")
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise UsageError(f"environment variable {name}={raw!r} is not an integer") from None
    if value < minimum:
        raise UsageError(f"environment variable {name}={raw!r} must be >= {minimum}")
    return value


_TPN_ITEM = r"^\s*(\d+)\s*(?:\(x(\d+)\))?\s*$"   # re imported where used (start-up cost)


def parse_tasks_per_node(name: str, raw: str) -> List[int]:
    """Expand Slurm's ``"2(x3),1"`` into ``[2, 2, 2, 1]``."""
    import re

    counts = []
    for item in str(raw).split(","):
        m = re.match(_TPN_ITEM, item)
        if not m:
            raise UsageError(f"environment variable {name}={raw!r} is not in Slurm's '2(x3),1' form")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def _check(info: RankInfo, names: Dict[str, str]) -> RankInfo:
    """Consistency checks; ``names`` maps field -> variable name for the messages."""
    if info.size is not None:
        if info.size < 1:
            raise UsageError(f"environment variable {names['size']}={info.size} must be >= 1")
        if info.rank >= info.size:
            raise UsageError(
                f"environment variable {names['rank']}={info.rank} is not below "
                f"{names['size']}={info.size}")
    if info.local_size is not None:
        if info.local_size < 1:
            raise UsageError(
                f"environment variable {names['local_size']}={info.local_size} must be >= 1")
        if info.local_rank is not None and info.local_rank >= info.local_size:
            raise UsageError(
                f"environment variable {names['local_rank']}={info.local_rank} is not below "
                f"{names['local_size']}={info.local_size}")
        if info.size is not None and info.local_size > info.size:
            raise UsageError(
                f"environment variable {names['local_size']}={info.local_size} exceeds "
                f"{names['size']}={info.size}")
    if info.node_index is not None and info.num_nodes is not None \
            and info.node_index >= info.num_nodes:
        raise UsageError(
            f"environment variable {names['node_index']}={info.node_index} is not below "
            f"{names['num_nodes']}={info.num_nodes}")
    return info


def _local_node(info: RankInfo) -> RankInfo:
    """Every rank is on this node: node index 0 of 1, no MPI needed to know it."""
    if info.node_index is None and info.complete and info.local_size == info.size:
        return info._replace(node_index=0, num_nodes=1)
    return info


def starter_fds(env: Mapping[str, str]) -> Tuple[int, ...]:
    """Descriptors the starter left open for the rank, which the worker (the real MPI
    process) must inherit. Hydra's simple PMI (MPICH, Intel MPI) names its socket to the proxy
    in ``PMI_FD``; a worker started with that socket closed fails in ``MPI_Init`` (MPICH:
    "PMIU_write error ... Bad file descriptor", Intel MPI: SIGSEGV after "PMI_Get_appnum
    returned -1"). Open MPI's PMIx and Slurm's PMI connect by address instead: nothing to keep."""
    raw = env.get("PMI_FD", "")
    if not raw.isdigit():
        return ()
    try:
        os.fstat(int(raw))
    except OSError:
        return ()
    return (int(raw),)


# The variables each starter gives a rank (measured: docs/OPENMPI_FACTS.md); neither says
# which node the rank is on (Slurm's do: below).
_STARTER_VARS = {
    "openmpi": dict(rank="OMPI_COMM_WORLD_RANK", size="OMPI_COMM_WORLD_SIZE",
                    local_rank="OMPI_COMM_WORLD_LOCAL_RANK", local_size="OMPI_COMM_WORLD_LOCAL_SIZE"),
    "hydra": dict(rank="PMI_RANK", size="PMI_SIZE", local_rank="MPI_LOCALRANKID",
                  local_size="MPI_LOCALNRANKS"),
}


def _from_vars(env: Mapping[str, str], starter: str, hostname: str) -> RankInfo:
    names = _STARTER_VARS[starter]
    info = RankInfo(
        rank=_int(env, names["rank"]), size=_int(env, names["size"], 1),
        local_rank=_int(env, names["local_rank"]), local_size=_int(env, names["local_size"], 1),
        node_index=None, num_nodes=None, hostname=hostname, starter=starter)
    return _local_node(_check(info, names))


def read_identity(env: Mapping[str, str], hostname: str = "") -> RankInfo:
    """Read this process's rank, size, local rank/size and (if knowable) node index."""
    if "OMPI_COMM_WORLD_RANK" in env:
        return _from_vars(env, "openmpi", hostname)
    if "MPI_LOCALRANKID" in env or ("PMI_RANK" in env and "SLURM_PROCID" not in env):
        return _from_vars(env, "hydra", hostname)

    if "SLURM_PROCID" in env:
        names = dict(rank="SLURM_PROCID", size="SLURM_NTASKS", local_rank="SLURM_LOCALID",
                     local_size="SLURM_STEP_TASKS_PER_NODE", node_index="SLURM_NODEID",
                     num_nodes="SLURM_NNODES")
        node_id = _int(env, "SLURM_NODEID")
        tpn_name = ("SLURM_STEP_TASKS_PER_NODE" if "SLURM_STEP_TASKS_PER_NODE" in env
                    else "SLURM_TASKS_PER_NODE")
        names["local_size"] = tpn_name
        if tpn_name not in env:
            raise UsageError(
                "environment variable SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE) "
                "is not set")
        per_node = parse_tasks_per_node(tpn_name, env[tpn_name])
        if node_id >= len(per_node):
            raise UsageError(
                f"environment variable SLURM_NODEID={node_id} has no entry in "
                f"{tpn_name}={env[tpn_name]!r}")
        num_nodes = _int(env, "SLURM_NNODES", 1) if "SLURM_NNODES" in env else len(per_node)
        info = RankInfo(
            rank=_int(env, names["rank"]), size=_int(env, names["size"], 1),
            local_rank=_int(env, names["local_rank"]), local_size=per_node[node_id],
            node_index=node_id, num_nodes=num_nodes, hostname=hostname, starter="slurm")
        return _check(info, names)

    if "PMIX_RANK" in env:
        return RankInfo(rank=_int(env, "PMIX_RANK"), size=None, local_rank=None,
                        local_size=None, node_index=None, num_nodes=None,
                        hostname=hostname, starter="pmix")

    raise UsageError(
        "no starter's variables found (OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID, "
        "PMIX_RANK); run mpilaunch.rank under mpirun/mpiexec/srun")
