"""Elastic shrink, ``--min-hosts M``: after an attempt that lost hosts, the next one (a
relaunch: the starter is gone with the host) runs on the hosts left, while at least M are.

The hosts are the config's (hostfile, ``-H``, allocation), in order; a lost host is the name
the starter gave (Open MPI names it by its hostfile address, or by the name its daemon
reported: then the ranks' own reports of their host, and the plan's slots in order, say which
entry it was). The world size becomes the slots left (or stays the user's ``-np`` when the
hosts left hold it); ranks, ``LOCAL_*``, ``GROUP_RANK`` and MindSpore's worker count follow
from the new plan, as at any start. Rank 0's address is decided again (the user's
``--master_addr`` is kept). Fewer than M left, or a name that matches nothing: the next attempt
uses every host, as without the option.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional, Set, Tuple

from mpilaunch import net
from mpilaunch.backends import placement
from mpilaunch.config import resilience

if TYPE_CHECKING:
    from mpilaunch.attempts.nextattempt import Between


def shrink(step: "Between") -> Optional[Tuple[Any, List[str]]]:
    """After an attempt that lost hosts (``step.last.lost``: the starter's names for them),
    with ``--min-hosts M``: -> (cfg, dropped names) for the next attempt on the hosts left, or
    None (off, no host lost, a name not matched, or fewer than M left: the next attempt uses
    every host, as without the option). ``step.master_addr``: the user's. The world size
    becomes the slots left (or stays the user's ``-np`` when they hold it)."""
    cfg, att = step.cfg, step.last
    lr = resilience.of(cfg)
    if lr.min_hosts is None or not att.lost:
        return None
    gone = lost_indices(cfg, att)
    if gone is None:
        return None
    left = tuple(h for i, h in enumerate(cfg.hosts) if i not in gone)
    if len(left) < lr.min_hosts or not left:
        return None
    slots = sum(h.slots for h in left)
    np = slots if cfg.np >= sum(h.slots for h in cfg.hosts) else min(cfg.np, slots)
    dropped = [cfg.hosts[i].name for i in sorted(gone)]
    return cfg._replace(hosts=left, np=np, master_addr=step.master_addr,
                        resilience=lr._replace(rank0_here=net.rank0_is_here(left))), dropped


def host_of_rank(cfg: Any, rank: int) -> Optional[int]:
    """The index in ``cfg.hosts`` of the host the plan put ``rank`` on (slots in order), or
    None."""
    slots = placement.slots_in_order(cfg.hosts)
    return slots[rank] if 0 <= rank < len(slots) else None


def lost_indices(cfg: Any, att: Any) -> Optional[Set[int]]:
    """The indices in ``cfg.hosts`` of the hosts ``att`` (an AttemptRecord) lost (set), or
    None when a lost name matches no host (nor the host of any rank)."""
    from mpilaunch.config.sshconfig import alias, label

    gone: Set[int] = set()
    for name in att.lost:
        # the MPI names a host with a port of its own by its alias (config/sshconfig.py)
        idx = [i for i, h in enumerate(cfg.hosts) if name in (h.name, alias(h), label(h))]
        if not idx:    # Open MPI may name a host by the name its daemon reported: the ranks'
            found = (host_of_rank(cfg, r) for r, host in att.rank_hosts.items() if host == name)
            idx = sorted({i for i in found if i is not None})
        if not idx:
            return None
        gone.update(idx)
    return gone
