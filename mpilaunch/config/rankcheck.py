"""The rank side's options, checked by the launcher before mpirun starts: a value every rank
would refuse is one line and exit 2 here, instead of mpirun's banner and N copies of the
adapter's error after every rank started.

No rule is written here: each check calls the rank side's own function with the launcher's
flag name (``rank/binding/affinity.py`` --bind_core, ``rank/logs.py`` the log name and dir,
``rank/frameworkenv.py`` --visible-devices, ``rank/agree.py`` rank 0's address,
``net.py`` the address and port the scheduler binds), so both sides give the same answer.
What depends on the machine (CPUs, the log dir, the master address and port) is checked only
where the ranks concerned run on this machine (``net.is_here``, by name, no DNS): every host
for the CPU count, any host for the log dir, rank 0's host (the first host: mpirun maps by
slot) for the address and port. Remote hosts are checked by the ranks themselves.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from mpilaunch import contract, net
from mpilaunch.errors import UsageError
from mpilaunch.rank import frameworkenv, logs

if TYPE_CHECKING:
    from mpilaunch.config.hostfile import Host
    from mpilaunch.config.launchconfig import LaunchConfig


def check(cfg: LaunchConfig) -> None:
    """UsageError (``NAME=value: why; how to fix``) for any rank-side value the ranks would
    refuse, and a rank interpreter that does not exist here (the launching host runs ranks
    or, for a remote-only job, ``mpilaunch check`` covers the others)."""
    if not (os.path.isfile(cfg.python) and os.access(cfg.python, os.X_OK)):
        raise UsageError(f"--python={cfg.python}: no such executable on this host; give the "
                         "absolute path of the interpreter every host has")
    hosts = list(cfg.hosts)
    here = [net.is_here(h) for h in hosts]

    if cfg.bind_core:   # the binding rules are loaded by the launches that bind
        from mpilaunch.rank.binding import affinity

        affinity.parse_bind_core(cfg.bind_core, os.cpu_count() if all(here) else None,
                                 "--bind_core")
    if getattr(cfg, "bind_numa", None) and all(here):   # the file was read by config.launchconfig.build
        from mpilaunch.rank.binding import affinity

        affinity.check_numa_nodes(affinity.parse_bind_numa(cfg.bind_numa, "--bind_numa"),
                                  affinity.read_numa_topology(), "--bind_numa")
    tail = contract.parse_tail_spec(cfg.tail_worker_log)
    if tail:
        bad = sorted(r for r in tail if r >= cfg.np)
        if bad:
            raise UsageError(
                f"--tail_worker_log={cfg.tail_worker_log!r}: rank {bad[0]} does not exist (the "
                f"job has {cfg.np} ranks, 0-{cfg.np - 1}); give -1 (every rank), none, or "
                f"ranks below {cfg.np}")
    if not cfg.exec_mode:   # --exec writes no log files
        if cfg.worker_log_name is not None:
            logs.check_log_name(cfg.worker_log_name, cfg.np, "--worker_log_name")
        if any(here):
            logs.check_log_dir(cfg.log_dir, "--log_dir")
    if cfg.visible_devices is not None:
        frameworkenv.parse_devices(cfg.visible_devices, "--visible-devices")
    rank0_here = bool(here) and here[0]
    addr = _master_addr(cfg, hosts, rank0_here)
    if rank0_here and not cfg.dry_run:
        _check_port(cfg, addr)


def _master_addr(cfg: LaunchConfig, hosts: Sequence[Host], rank0_here: bool) -> str:
    """``--master_addr`` as rank 0 will use it (``agree.master_address``), checked to be rank
    0's host's where that can be told from here; else 127.0.0.1 (what rank 0 uses on one
    host)."""
    if not cfg.master_addr:
        return net.LOOPBACK
    from mpilaunch.rank import agree   # only with --master_addr: its own rule, not every launch's

    given = cfg.master_addr.strip()
    addr = agree.master_address(given, net.spans_machines(hosts), "--master_addr")
    if rank0_here:
        try:
            net.check_local_addr(addr, net.hostname())
        except net.PortError:
            raise UsageError(f"--master_addr={cfg.master_addr!r}: {addr} is not an address of "
                             f"rank 0's host {hosts[0].name} (this machine); "
                             f"{net.MASTER_ADDR_FIX}") from None
    else:
        elsewhere = [h.name for h in hosts[1:] if addr in net.ipv4s(h.name)]
        if elsewhere and addr not in net.ipv4s(hosts[0].name):
            raise UsageError(f"--master_addr={cfg.master_addr!r}: {addr} is host {elsewhere[0]}'s, "
                             f"but rank 0 (the scheduler) runs on {hosts[0].name}; "
                             f"{net.MASTER_ADDR_FIX}")
    return addr


def _check_port(cfg: LaunchConfig, addr: str) -> None:
    """Rank 0's own port check (``net.check_port``), here, before any rank starts; the
    refusal's ``kind`` says what happened."""
    if cfg.master_port == 0:
        return
    try:
        net.check_port(addr, cfg.master_port, net.hostname(), check_addr=False)
    except net.PortError as exc:
        raise UsageError(f"--master_port={cfg.master_port}: {exc.kind} on rank 0's host (this "
                         f"machine); give another port, or 0 to pick a free one") from None
