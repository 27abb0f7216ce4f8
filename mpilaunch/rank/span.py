"""Does the job really run where the launcher planned it? Pure.

The launcher sends ``--expect-ranks SPEC`` (``mpilaunch/backends/placement.py`` writes it):
``N;MODE;host:count,host:count,...`` with N the planned world size and MODE

* ``exact``: the hostfile's slots filled in order (``--map-by slot``, Hydra's ``host:N``): rank
  r runs on the host its index falls into, so its host runs exactly that host's count;
* ``bound``: the user's own mapping options (``--map-by node``, ``--host``, ``--rankfile``,
  ...): a host may run up to its slots, no more;
* ``size``: more ranks than slots (``--oversubscribe``): only the world size is checked.

Each rank checks what the starter (mpirun, srun, ...) told it (world size, ranks on its host) before the
agreement and before the script starts; no communication is needed, so it costs nothing.
When all ranks share one host (``local_size == size``: a hostfile silently overridden, two
names for one machine), every rank sees the whole running table and says so.
"""
from __future__ import annotations

from mpilaunch.errors import UsageError

TYPE_CHECKING = False   # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import Optional, Sequence, Tuple

    from mpilaunch.rank.identity import RankInfo

    # the plan of --expect-ranks: (N, MODE, ((host, count), ...))
    Plan = Tuple[int, str, Tuple[Tuple[str, int], ...]]

MODES = ("exact", "bound", "size")


def parse(spec: str) -> Plan:
    """``N;MODE;h:c,...`` -> (N, MODE, ((host, count), ...)); UsageError if malformed."""
    try:
        size, mode, hosts = spec.split(";", 2)
        table = []
        for item in filter(None, hosts.split(",")):
            name, _, count = item.rpartition(":")
            table.append((name, int(count)))
        n = int(size)
    except ValueError:
        raise UsageError(f"--expect-ranks {spec!r}: not N;MODE;host:count,...") from None
    if mode not in MODES or n < 1:
        raise UsageError(f"--expect-ranks {spec!r}: not N;MODE;host:count,...")
    return n, mode, tuple(table)


def host_of(rank: int, table: Sequence[Tuple[str, int]]) -> int:
    """Index of the planned host of ``rank`` when the slots are filled in order."""
    total = 0
    for i, (_, count) in enumerate(table):
        total += count
        if rank < total:
            return i
    return len(table) - 1


def problem(expect: Plan, rank: int, size: Optional[int], local_size: Optional[int],
            hostname: str) -> Optional[str]:
    """None when this rank runs as planned, else the one-paragraph explanation."""
    n, mode, table = expect
    why = None
    if size is not None and size != n:
        why = f"the job runs {size} ranks, the plan {n}"
    elif local_size is not None and mode == "exact" and table:
        want = table[host_of(rank, table)]
        if local_size != want[1]:
            why = (f"rank {rank} was planned on {want[0]} with {want[1]} rank(s) there, "
                   f"but its host {hostname} runs {local_size}")
    elif local_size is not None and mode == "bound" and table:
        most = max(c for _, c in table)
        if local_size > most:
            why = (f"host {hostname} runs {local_size} ranks, more than any planned host's "
                   f"{most} slot(s)")
    if why is None:
        return None
    planned = ", ".join(f"{h}: {c}" for h, c in table) + f"  ({n} ranks"
    planned += {"exact": ", hostfile slots in order)", "bound": ", your mapping options; "
                "at most the slots per host)", "size": ")"}[mode]
    if size is not None and local_size == size:
        running = f"{hostname}: {size}  (every rank on this one host)"
    else:
        running = (f"{hostname}: {local_size}  (this rank's host; {size} ranks in all; "
                   "other hosts are not visible from here)")
    return ("the ranks do not run where the plan put them (" + why + "); nothing started. "
            f"planned: {planned}. running: {running}. Usual causes: an mpirun option that "
            "overrides the hostfile or the mapping (--host, -H, --map-by, --rankfile in "
            "OPENMPI_EXTRA_ARGS/--extra-args), one machine listed under two names, a hostfile "
            "the MPI did not read; --no-span-check turns this check off")


def check(spec: str, info: RankInfo) -> None:
    """UsageError (exit 2, before the script) when this rank does not run as planned."""
    text = problem(parse(spec), info.rank, info.size, info.local_size, info.hostname)
    if text is not None:
        raise UsageError(text)
