"""The rank side's options, checked by the launcher before mpirun starts (issue 12 items 8, 9,
10, 15): a value every rank would refuse is one line and exit 2 here, instead of mpirun's
banner and N copies of the adapter's error after every rank started.

The rules are the rank side's own (``mpilaunch/rank/affinity.py``, ``mpilaunch/rank/logs.py``,
``mpilaunch/rank/agree.py``), called with the launcher's flag names, so a rule lives in one
place. What depends on the machine (CPUs, the log dir, the master address and port) is checked
only where the ranks concerned run on this machine (``ssh.is_local``, by name, no DNS): every
host for the CPU count, any host for the log dir, rank 0's host (the first host: mpirun maps by
slot) for the port. Remote hosts are checked by the ranks themselves, as before.
"""
from __future__ import annotations

import os
import socket

from mpilaunch import contract, ssh
from mpilaunch.errors import UsageError
from mpilaunch.rank import affinity, agree, logs


def _ipv4s(name: str) -> set:
    try:
        return {i[4][0] for i in socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)}
    except (OSError, UnicodeError):
        return set()


def check(cfg) -> None:
    """UsageError (``NAME=value: why; how to fix``) for any rank-side value the ranks would
    refuse, and a rank interpreter that does not exist here (the launching host runs ranks
    or, for a remote-only job, ``mpilaunch check`` covers the others)."""
    if not (os.path.isfile(cfg.python) and os.access(cfg.python, os.X_OK)):
        raise UsageError(f"--python={cfg.python}: no such executable on this host; give the "
                         "absolute path of the interpreter every host has")
    hosts = list(cfg.hosts)
    all_local = all(ssh.host_is_here(h) for h in hosts)
    any_local = any(ssh.host_is_here(h) for h in hosts)
    rank0_local = ssh.rank0_is_here(hosts)

    if cfg.bind_core:
        affinity.parse_bind_core(cfg.bind_core, os.cpu_count() if all_local else None,
                                 "--bind_core")
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
        if any_local:
            logs.check_log_dir(cfg.log_dir, "--log_dir")
    if cfg.visible_devices is not None:
        devices = [d.strip() for d in str(cfg.visible_devices).split(",")]
        if not all(devices):
            raise UsageError(f"--visible-devices={cfg.visible_devices!r}: has an empty entry; "
                             "give a comma list of device ids, one per local rank, such as 0,1,2,3")
    addr = _master_addr(cfg, hosts, rank0_local)
    if rank0_local and not cfg.dry_run:
        _check_port(cfg, addr)


def _master_addr(cfg, hosts, rank0_local: bool) -> str:
    """``--master_addr`` resolved to IPv4 and checked to be rank 0's host's, where that can be
    told from here; else 127.0.0.1 (what rank 0 uses on one host)."""
    if not cfg.master_addr:
        return agree.LOOPBACK
    fix = "give rank 0's host name or one of its addresses (or leave it out)"
    name = cfg.master_addr.strip()
    addrs = _ipv4s(name)
    if not addrs:
        raise UsageError(f"--master_addr={cfg.master_addr!r}: does not resolve to an IPv4 "
                         f"address; {fix}")
    addr = sorted(addrs)[0] if name not in addrs else name
    if addr.startswith("127.") and not all(ssh.host_is_here(h) for h in hosts):
        raise UsageError(f"--master_addr={cfg.master_addr!r}: a loopback address, but the ranks "
                         f"span several hosts; {fix}")
    if rank0_local:
        if not (addr.startswith("127.") or addr in ssh.local_addresses()):
            raise UsageError(f"--master_addr={cfg.master_addr!r}: {addr} is not an address of "
                             f"rank 0's host {hosts[0].name} (this machine); {fix}")
    else:
        elsewhere = [h.name for h in hosts[1:] if addr in _ipv4s(h.name)]
        if elsewhere and addr not in _ipv4s(hosts[0].name):
            raise UsageError(f"--master_addr={cfg.master_addr!r}: {addr} is host {elsewhere[0]}'s, "
                             f"but rank 0 (the scheduler) runs on {hosts[0].name}; {fix}")
    return addr


def _check_port(cfg, addr: str) -> None:
    """Rank 0's own port check (agree.check_port), here, before any rank starts."""
    if cfg.master_port == 0:
        return
    try:
        agree.check_port(addr, cfg.master_port, socket.gethostname(), check_addr=False)
    except UsageError as exc:
        why = "already in use" if "already in use" in str(exc) else "not allowed"
        raise UsageError(f"--master_port={cfg.master_port}: {why} on rank 0's host (this "
                         f"machine); give another port, or 0 to pick a free one") from None
