"""The job's ssh configuration: where every ssh of a launch goes for each host entry. Pure.

A hostfile entry may carry its own sshd port (``host slots=N port=P``, ``host:N@P``: hostfile.py),
and one address may be listed once per port (containers sharing a machine, each with its sshd on
a port of its own). No MPI takes a port per host (Open MPI has one ``plm_rsh_args``, Hydra one
launcher argument string), and listing one address twice would make an MPI merge the entries
into one node. So when any entry has a port, the MPI is handed the job's ssh configuration
(``-F RUN_DIR/ssh_config``, the file 0600 in the private run dir, written with the MPI's hostfile)
and a hostfile of aliases: one ``Host`` block per entry, with ``HostName`` (the real address)
and ``Port`` (the entry's, else ``--ssh-port``/``SSHD_PORT``). The user's own ssh configuration
(their ``-F FILE`` from ``--ssh-args``, else ``~/.ssh/config`` and ``/etc/ssh/ssh_config``) is
included after the blocks: ssh takes the first value it reads, so the blocks' ``HostName`` and
``Port`` win and everything else (User, IdentityFile, ...) still comes from the user's files,
whose ``Host`` blocks match the real name as well as the alias (``Match final``: OpenSSH 8.4+).

ssh that mpilaunch opens itself (the preflight, ``check``, ``check --deep``'s probe, the
discovery preflight, ``mpilaunch job``) goes to the entry's real name with ``-p`` of
:func:`port_of`: the same address and port as the alias, so it reaches the same sshd, matches
the user's ``Host`` blocks written for that name, and shares the control master the MPI's ssh
reuses (ControlPath ``%C`` hashes the real address and port). Ranks and the scheduler never see
an alias: they run on the real hosts and derive their addresses there (rank/agree.py).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

from mpilaunch.errors import UsageError

if TYPE_CHECKING:   # hostfile.py and launchconfig.py import this module: their shapes, not them
    from typing import Protocol

    class _Host(Protocol):   # config/hostfile.py's Host
        @property
        def name(self) -> str: ...
        @property
        def port(self) -> Optional[int]: ...

    class _Cfg(Protocol):    # config/launchconfig.py's LaunchConfig
        @property
        def hosts(self) -> Sequence[_Host]: ...
        @property
        def ssh_port(self) -> Optional[int]: ...
        @property
        def ssh_extra(self) -> Sequence[str]: ...

FILE = "ssh_config"      # in the run dir
USER_DEFAULTS = ("~/.ssh/config", "/etc/ssh/ssh_config")   # what ssh reads without -F


def needed(hosts: Sequence[_Host]) -> bool:
    """Some entry has an ssh port of its own, or is an IPv6 literal: the MPI gets the job's
    ssh configuration."""
    return any(getattr(h, "port", None) is not None or ":" in h.name for h in hosts)


def alias(host: _Host) -> str:
    """The name the MPI (its hostfile, its ssh) is given for ``host``: the host's own name when
    it has no port of its own, else ``portP-NAME`` with NAME's dots and colons as dashes: one
    label starting with a letter (Open MPI reads a hostfile word that starts like an IPv4
    address as one and cuts a dotted name at its first dot; Hydra's ``host:N`` lines split at a
    colon). An IPv6 literal is ``ipv6-NAME`` (Open MPI 4.1's node-name regex refuses a colon:
    "illegal character in the following node name", measured; 5.0 takes either). A name that resolves nowhere: the MPIs start their daemons there through ssh, which
    the configuration brings to the real host."""
    flat = host.name.replace(".", "-").replace(":", "-")
    if host.port is not None:
        return f"port{host.port}-{flat}"
    return f"ipv6-{flat}" if ":" in host.name else host.name


def label(host: _Host) -> str:
    """How messages and per-host results name a host entry (``hostfile.label``): its name, with
    ``:port`` (``[v6]:port``) when it has a port of its own (the same address may then be listed
    once per port)."""
    if host.port is None:
        return host.name
    return f"[{host.name}]:{host.port}" if ":" in host.name else f"{host.name}:{host.port}"


def port_of(host: _Host, default: Optional[int]) -> Optional[int]:
    """The sshd port of ``host``: its own, else the launch's (``--ssh-port``/``SSHD_PORT``),
    else None (ssh's configuration or 22)."""
    return host.port if host.port is not None else default


def conflicts(hosts: Sequence[_Host]) -> Optional[str]:
    """Why these entries cannot be told apart by their aliases (an entry named like another's
    alias), or None."""
    seen: Dict[str, Tuple[str, Optional[int]]] = {}
    for h in hosts:
        key = alias(h).lower()
        if key in seen and seen[key] != (h.name.lower(), h.port):
            return f"host {alias(h)!r} is also the alias of {seen[key][0]} port {seen[key][1]}"
        seen[key] = (h.name.lower(), h.port)
    return None


def validate(hosts: Sequence[_Host], hosts_source: str, extra: Sequence[str], starter: str,
             in_slurm: bool, ssh_in_mca: bool) -> None:
    """The ports of the entries can reach every ssh of the launch; else UsageError (exit 2)."""
    with_port = [h for h in hosts if getattr(h, "port", None) is not None]
    if not with_port:
        return
    first = label(with_port[0])
    if starter == "srun" or in_slurm:
        raise UsageError(f"{hosts_source}: {first}: an ssh port on a Slurm-allocated host list; "
                         "inside a Slurm job the ranks are started through srun, not ssh: drop the port")
    if ssh_in_mca:
        raise UsageError(f"{hosts_source}: {first}: ssh ports in the host list and plm_rsh_args in "
                         "the MCA/extra args; give the ssh options with --ssh-args instead")
    if any(t == "-p" or (t.startswith("-p") and t[2:].isdigit()) for t in extra):
        raise UsageError(f"{hosts_source}: {first}: ssh ports in the host list and -p in --ssh-args; "
                         "give the other hosts' port with --ssh-port (or port= on each entry)")
    why = conflicts(hosts)
    if why:
        raise UsageError(f"{hosts_source}: {why}; rename the host")


def split_user_config(extra: Sequence[str]) -> Tuple[Optional[str], List[str]]:
    """The user's ``-F FILE`` (the last one: ssh's rule) out of their ssh options -> (FILE or
    None, the other options)."""
    path: Optional[str] = None
    rest: List[str] = []
    i, extra = 0, list(extra)
    while i < len(extra):
        tok = extra[i]
        if tok == "-F" and i + 1 < len(extra):
            path, i = extra[i + 1], i + 2
            continue
        if tok.startswith("-F") and len(tok) > 2:
            path, i = tok[2:], i + 1
            continue
        rest.append(tok)
        i += 1
    return path, rest


def render(hosts: Sequence[_Host], default_port: Optional[int], user_config: Optional[str],
           home: str) -> str:
    """The job's ssh configuration (see the module docstring)."""
    lines = ["# The ssh configuration of one mpilaunch job: a Host alias per hostfile entry",
             "# (mpilaunch/config/sshconfig.py). Removed with the job's run directory."]
    for h in hosts:
        port = port_of(h, default_port)
        lines.append(f"Host {alias(h)}")
        lines.append(f"    HostName {h.name}")
        if port is not None:
            lines.append(f"    Port {port}")
    # "Match final" makes ssh read the files a second time with the real name (HostName): the
    # user's Host blocks written for that name (User, IdentityFile, host keys) then apply to
    # the alias too; values already set (this HostName, this Port) stay, ssh keeps the first
    lines.append("Match final")
    lines.append("Match all")
    includes = [user_config] if user_config else list(USER_DEFAULTS)
    for path in includes:
        if path.startswith("~/"):
            path = os.path.join(home, path[2:])
        lines.append(f"    Include {os.path.abspath(path)}")
    return "\n".join(lines) + "\n"


def mpi_ssh_args(cfg: _Cfg, run_dir: str) -> List[str]:
    """The ssh options the MPI's own ssh is given: ``-p PORT`` and the user's, or, when some
    entry has a port of its own, ``-F`` of the job's configuration (which carries every port and
    includes the user's ``-F``) and the user's other options. A ``-p`` given there would win
    over every entry's ``Port``."""
    if not needed(cfg.hosts):
        return ([] if cfg.ssh_port is None else ["-p", str(cfg.ssh_port)]) + list(cfg.ssh_extra)
    _, rest = split_user_config(cfg.ssh_extra)
    return ["-F", os.path.join(run_dir, FILE)] + rest


def direct(job: Optional[Tuple[str, str]], extra: Sequence[str]
           ) -> Tuple[List[str], Dict[str, int]]:
    """For ssh opened without the job's file (gone with the run dir once the MPI ended: the
    probes after a failed Hydra launch): -> (the ssh options with the user's ``-F`` back in
    place of the job's, {alias: port} as the file gave them)."""
    if not job:
        return list(extra), {}
    path, text = job
    rest: List[str] = []
    i, extra = 0, list(extra)
    while i < len(extra):
        if extra[i] == "-F" and i + 1 < len(extra) and extra[i + 1] == path:
            i += 2
            continue
        rest.append(extra[i])
        i += 1
    ports: Dict[str, int] = {}
    host: Optional[str] = None
    includes: List[str] = []
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "Host":
            host = value
        elif key == "Port" and host:
            ports[host] = int(value)
        elif key == "Include":
            includes.append(value)
    if len(includes) == 1:   # the user's -F (else ssh's own defaults: nothing to give)
        rest = ["-F", includes[0]] + rest
    return rest, ports


def job_file(cfg: _Cfg, run_dir: str, home: Optional[str] = None) -> Optional[Tuple[str, str]]:
    """(path, text) of the job's ssh configuration, or None when no entry has a port."""
    if not needed(cfg.hosts):
        return None
    user, _ = split_user_config(cfg.ssh_extra)
    home = home if home is not None else os.path.expanduser("~")
    return os.path.join(run_dir, FILE), render(cfg.hosts, cfg.ssh_port, user, home)
