"""Hostfiles: Open MPI (``host slots=N max_slots=M port=P``), MPICH (``host:N`` or
``host:N@P``), ``-H`` lists and ``VC_WORKER_HOSTS`` (``host[:N][@P]``). Pure: text in, ``Host``
list out; every error names file and line.

``port``: that host's sshd port (containers sharing one address each expose their sshd on a port
of their own); the same address may be listed once per port, each its own host. An IPv6 literal
is given bare (``fd00::1 slots=2``) or bracketed (``[fd00::1]:2@2201``; brackets are needed
before ``:N``) and kept bare; a zone index (``fe80::1%eth0``) is refused: it names an interface of
one machine only. How the ports reach ssh: mpilaunch/config/sshconfig.py, docs/NETWORKS.md.

A host listed without a slot count gets 1 slot (msrun's and ModelArts' meaning; Open MPI
itself would count the host's cores), so mpilaunch always hands mpirun a normalised hostfile
with explicit counts (docs/OPENMPI_FACTS.md section 7).
"""
import re
from typing import Iterable, List, NamedTuple, Optional, Tuple

from mpilaunch import net
from mpilaunch.config import sshconfig
from mpilaunch.config.sshconfig import label as label  # re-exported: messages name a host hf.label
from mpilaunch.errors import UsageError

# RFC 1123 host names and IPv4/IPv6 literals; nothing that could smuggle an option or a shell word.
# patterns are compiled where first used (re caches them): a launch that reads no hostfile
# does not pay for the compilation (docs/ARCHITECTURE.md, start-up)
_HOST_RE = r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})|\[?[0-9A-Fa-f:.]+\]?)$"


class Host(NamedTuple):
    """One host of the launch (a namedtuple: docs/ARCHITECTURE.md, start-up)."""

    name: str                        # an IPv6 literal without brackets
    slots: int = 1
    max_slots: Optional[int] = None
    port: Optional[int] = None       # its sshd port (None: --ssh-port / SSHD_PORT / ssh's own)


def _where(source: str, lineno: Optional[int]) -> str:
    return f"{source}:{lineno}" if lineno is not None else source


# Open MPI keeps slot counts in a C int (99999999999999999999 became slots=-1); no host has
# anywhere near this many slots.
MAX_SLOTS = 1_000_000


def _count(text: str, what: str, where: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise UsageError(f"{where}: {what} must be a whole number, got {text!r}") from None
    if value <= 0:
        raise UsageError(f"{where}: {what} must be at least 1, got {value}")
    if value > MAX_SLOTS:
        raise UsageError(f"{where}: {what}={value} is more than {MAX_SLOTS:,} slots on one host")
    return value


MAX_PORT = 65535


def _port(text: str, where: str) -> int:
    try:
        value = int(text, 10) if text.isascii() else None
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_PORT:
        raise UsageError(f"{where}: ssh port {text!r} is not a port between 1 and {MAX_PORT}")
    return value


def check_name(name: str, where: str) -> str:
    """A host name or address as given -> as kept (IPv6 brackets dropped); UsageError naming
    ``where`` else."""
    if "%" in name and ":" in name:
        raise UsageError(f"{where}: {name!r}: an IPv6 address with a zone index (%...) names a "
                         "link of one machine only; give a global or ULA (fd00::/8) address")
    if not re.match(_HOST_RE, name) or name.startswith("-"):
        raise UsageError(f"{where}: {name!r} is not a valid host name")
    if name.startswith("[") != name.endswith("]") or (name.startswith("[") and ":" not in name):
        raise UsageError(f"{where}: {name!r} is not a valid host name")
    bare = name[1:-1] if name.startswith("[") else name
    if ":" in bare:
        if not net.is_ipv6(bare):
            raise UsageError(f"{where}: {name!r} is not a valid IPv6 address")
    return bare


def split_item(item: str, where: str) -> Tuple[str, Optional[int], Optional[int]]:
    """``host[:N][@P]`` (``[v6]:N@P``; a bare IPv6 literal takes no ``:N``) -> (name, slots or
    None, port or None). The form of Hydra's hostfile lines, -H items, VC_WORKER_HOSTS and a
    discovery script's lines."""
    head, at, port_text = item.rpartition("@")
    if not at:
        head = item
    port = _port(port_text, where) if at else None
    if head.startswith("["):
        close = head.find("]")
        name, rest = head[:close + 1], head[close + 1:]
        if close < 0 or (rest and not rest.startswith(":")):
            raise UsageError(f"{where}: {item!r} is not host[:slots][@port]")
        count = rest[1:] if rest else None
    elif head.count(":") > 1:
        name, count = head, None    # a bare IPv6 literal: no slot count after it
    else:
        name, sep, count = head.partition(":")
        count = count if sep else None
    if not name:
        raise UsageError(f"{where}: no host name in {item!r}")
    slots = _count(count, "slot count", where) if count is not None else None
    return check_name(name, where), slots, port


def parse_line(line: str, where: str) -> Optional[Host]:
    """One hostfile line (either dialect) -> Host, or None for blank/comment lines."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    fields = text.split()
    head = fields[0]
    if "@" in head or (":" in head and head.count(":") == 1) or (
            head.startswith("[") and "]:" in head):
        # MPICH style: host:N, host:N@P (no further fields allowed)
        if len(fields) > 1:
            raise UsageError(f"{where}: unexpected {fields[1]!r} after {head!r}")
        name, count, item_port = split_item(head, where)
        if count is None and ":" not in name and "@" not in head:
            raise UsageError(f"{where}: {head!r} is not host:slots")
        return Host(name, count or 1, None, item_port)
    name = check_name(head, where)
    slots: Optional[int] = None
    max_slots: Optional[int] = None
    port: Optional[int] = None
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if not sep:
            raise UsageError(f"{where}: expected key=value after the host name, got {field!r}")
        key = key.lower()
        if key in ("slots", "count", "cpu"):
            slots = _count(value, key, where)
        elif key == "max_slots":
            max_slots = _count(value, "max_slots", where)
        elif key == "port":
            port = _port(value, where)
        else:
            raise UsageError(f"{where}: unknown hostfile key {key!r} (expected slots=, max_slots= or port=)")
    if slots is None:
        slots = 1
    if max_slots is not None and max_slots < slots:
        raise UsageError(f"{where}: max_slots={max_slots} is smaller than slots={slots}")
    return Host(name, slots, max_slots, port)


def _no_duplicates(hosts: Iterable[tuple[Host, str]]) -> List[Host]:
    seen: dict[tuple[str, Optional[int]], str] = {}   # (name, port) -> where it was listed
    out: List[Host] = []
    for host, where in hosts:
        # host names are case-insensitive (localhost = LOCALHOST); one address with two ports is
        # two hosts (containers sharing a machine), so the port is part of the key
        key = (host.name.lower(), host.port)
        if key in seen:
            raise UsageError(f"{where}: host {label(host)!r} is listed twice (first at {seen[key]})")
        seen[key] = where
        out.append(host)
    return out


def parse_text(text: str, source: str = "<hostfile>") -> List[Host]:
    entries = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = _where(source, lineno)
        host = parse_line(line, where)
        if host is not None:
            entries.append((host, where))
    if not entries:
        raise UsageError(f"{source}: the hostfile lists no hosts")
    return _no_duplicates(entries)


def read_hostfile(path: str) -> List[Host]:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise UsageError(f"hostfile {path}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"hostfile {path}: is a directory") from None
    except PermissionError:
        raise UsageError(f"hostfile {path}: permission denied") from None
    except UnicodeDecodeError:
        raise UsageError(f"hostfile {path}: not a text file") from None
    return parse_text(text, path)


def parse_host_list(spec: str, source: str = "-H") -> List[Host]:
    """``-H a:2,b:2`` or ``a,b`` (1 slot each); ``a:2@2201`` gives a an ssh port of its own."""
    items = [item.strip() for item in spec.split(",")]
    entries = []
    for index, item in enumerate(items, start=1):
        where = f"{source} item {index}"
        if not item:
            raise UsageError(f"{where}: empty host name in {spec!r}")
        name, count, port = split_item(item, where)
        entries.append((Host(name, count or 1, None, port), where))
    return _no_duplicates(entries)


def hosts_from_vc_worker_hosts(value: str, slots_per_host: int, source: str = "VC_WORKER_HOSTS") -> List[Host]:
    """ModelArts/Volcano: a comma list of hosts, each with the same slot count."""
    if slots_per_host <= 0:
        raise UsageError(f"slots per host must be at least 1, got {slots_per_host}")
    hosts = parse_host_list(value, source)
    for host in hosts:
        if host.slots != 1:
            raise UsageError(f"{source}: {host.name}:{host.slots}: give plain host names; slots come from the per-host count")
    return [Host(h.name, slots_per_host, None, h.port) for h in hosts]


def total_slots(hosts: Iterable[Host]) -> int:
    return sum(h.slots for h in hosts)


def render_entries(hosts: Iterable[Host]) -> str:
    """Hosts as a hostfile mpilaunch reads back (``mpilaunch job``'s): real names, their ports."""
    return "".join(f"{h.name} slots={h.slots}" + (f" port={h.port}" if h.port is not None else "")
                   + "\n" for h in hosts)


def render_hostfile(hosts: Iterable[Host]) -> str:
    """The normalised Open MPI hostfile handed to mpirun (explicit slot counts); a host is
    named as the job's ssh configuration names it (mpilaunch/config/sshconfig.py)."""
    lines = []
    for h in hosts:
        line = f"{sshconfig.alias(h)} slots={h.slots}"
        if h.max_slots is not None:
            line += f" max_slots={h.max_slots}"
        lines.append(line)
    return "\n".join(lines) + "\n"
