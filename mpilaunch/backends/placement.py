"""Where the ranks should run, for the check each rank makes before its script starts
(the check itself: ``mpilaunch/rank/span.py``). Pure.

The plan is the hostfile's slots filled in order, which is what ``--map-by slot`` (the
ModelArts default binding args) and Hydra's ``host:N`` hostfile do: ``exact``. When the
user's own mpirun options choose the placement (``--map-by`` other than slot, ``--host``,
``--rankfile``, ``--npernode``, ``-ppn``, ...), only a bound can be checked (no host runs more
than its slots): ``bound``. With more ranks than slots (``--oversubscribe``), only the world
size: ``size``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Sequence

from mpilaunch.config import mpiargs

if TYPE_CHECKING:
    from mpilaunch.config.hostfile import Host
    from mpilaunch.config.launchconfig import LaunchConfig

# mpirun options that decide the placement themselves (Open MPI 4/5 and Hydra spellings)
PLACEMENT = ("host", "h", "rankfile", "rf", "npernode", "pernode", "ppr", "npersocket",
             "bynode", "byslot", "ppn", "rr", "hosts", "hostlist", "f", "machinefile",
             "configfile", "mapall")


def slots_in_order(hosts: Sequence[Host]) -> List[int]:
    """The index in ``hosts`` of each slot, the hosts' slots filled in order: rank r runs on
    ``hosts[slots_in_order(hosts)[r]]`` where the plan is ``exact`` (the hostfile's order,
    ``--map-by slot``, Hydra's ``host:N``)."""
    return [i for i, h in enumerate(hosts) for _ in range(h.slots)]


def mode(tokens: List[str], oversubscribed: bool) -> str:
    if oversubscribed:
        return "size"
    for i, tok in enumerate(tokens):
        name = tok.lstrip("-").split("=", 1)[0].lower()
        if not tok.startswith("-"):
            continue
        if name == "map-by":
            value = tok.split("=", 1)[1] if "=" in tok else (tokens[i + 1] if i + 1 < len(tokens) else "")
            if value.split(":")[0].lower() not in ("slot", "core"):
                return "bound"
        elif name in PLACEMENT or name == "h" and tok == "-H":
            return "bound"
    return "exact"


def expect_spec(cfg: LaunchConfig) -> Optional[str]:
    """``N;MODE;host:count,...`` for ``--expect-ranks``; None when there is nothing to check."""
    if not cfg.hosts:
        return None
    tokens = mpiargs.words(cfg.mpi_pieces)
    slots = sum(h.slots for h in cfg.hosts)
    m = mode(tokens, cfg.np > slots)
    if m == "exact":
        placed = slots_in_order(cfg.hosts)[:cfg.np]
        table = [(h.name, placed.count(i)) for i, h in enumerate(cfg.hosts) if i in placed]
    else:
        table = [(h.name, h.slots) for h in cfg.hosts]
    return f"{cfg.np};{m};" + ",".join(f"{name}:{count}" for name, count in table)
