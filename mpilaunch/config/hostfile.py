"""Hostfiles: Open MPI (``host slots=N max_slots=M``), MPICH (``host:N``), ``-H`` lists and
``VC_WORKER_HOSTS``. Pure: text in, ``Host`` list out; every error names file and line.

A host listed without a slot count gets 1 slot (msrun's and ModelArts' meaning; Open MPI
itself would count the host's cores), so mpilaunch always hands mpirun a normalised hostfile
with explicit counts (docs/OPENMPI_FACTS.md section 7).
"""
from __future__ import annotations

import re
from collections import namedtuple
from typing import Iterable, List, Optional

from mpilaunch.errors import UsageError

# RFC 1123 host names and IPv4/IPv6 literals; nothing that could smuggle an option or a shell word.
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252})|\[?[0-9A-Fa-f:.]+\]?)$")


class Host(namedtuple("Host", "name slots max_slots", defaults=(1, None))):
    """name: str;
    slots: int;
    max_slots: Optional[int].
    (A namedtuple: docs/ARCHITECTURE.md, start-up.)"""

    __slots__ = ()


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


def _check_name(name: str, where: str) -> str:
    if not _HOST_RE.match(name) or name.startswith("-"):
        raise UsageError(f"{where}: {name!r} is not a valid host name")
    return name


def parse_line(line: str, where: str) -> Optional[Host]:
    """One hostfile line (either dialect) -> Host, or None for blank/comment lines."""
    text = line.split("#", 1)[0].strip()
    if not text:
        return None
    fields = text.split()
    head = fields[0]
    if ":" in head and not head.startswith("[") and head.count(":") == 1:
        # MPICH style: host:N (no further fields allowed)
        if len(fields) > 1:
            raise UsageError(f"{where}: unexpected {fields[1]!r} after {head!r}")
        name, _, count = head.partition(":")
        return Host(_check_name(name, where), _count(count, "slot count", where))
    name = _check_name(head, where)
    slots: Optional[int] = None
    max_slots: Optional[int] = None
    for field in fields[1:]:
        key, sep, value = field.partition("=")
        if not sep:
            raise UsageError(f"{where}: expected key=value after the host name, got {field!r}")
        key = key.lower()
        if key in ("slots", "count", "cpu"):
            slots = _count(value, key, where)
        elif key == "max_slots":
            max_slots = _count(value, "max_slots", where)
        else:
            raise UsageError(f"{where}: unknown hostfile key {key!r} (expected slots= or max_slots=)")
    if slots is None:
        slots = 1
    if max_slots is not None and max_slots < slots:
        raise UsageError(f"{where}: max_slots={max_slots} is smaller than slots={slots}")
    return Host(name, slots, max_slots)


def _no_duplicates(hosts: Iterable[tuple[Host, str]]) -> List[Host]:
    seen: dict[str, str] = {}
    out: List[Host] = []
    for host, where in hosts:
        key = host.name.lower()   # host names are case-insensitive (localhost = LOCALHOST)
        if key in seen:
            raise UsageError(f"{where}: host {host.name!r} is listed twice (first at {seen[key]})")
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
    """``-H a:2,b:2`` or ``a,b`` (1 slot each)."""
    items = [item.strip() for item in spec.split(",")]
    entries = []
    for index, item in enumerate(items, start=1):
        where = f"{source} item {index}"
        if not item:
            raise UsageError(f"{where}: empty host name in {spec!r}")
        name, sep, count = item.partition(":")
        host = Host(_check_name(name, where), _count(count, "slot count", where) if sep else 1)
        entries.append((host, where))
    return _no_duplicates(entries)


def hosts_from_vc_worker_hosts(value: str, slots_per_host: int, source: str = "VC_WORKER_HOSTS") -> List[Host]:
    """ModelArts/Volcano: a comma list of hosts, each with the same slot count."""
    if slots_per_host <= 0:
        raise UsageError(f"slots per host must be at least 1, got {slots_per_host}")
    hosts = parse_host_list(value, source)
    for host in hosts:
        if host.slots != 1:
            raise UsageError(f"{source}: {host.name}:{host.slots}: give plain host names; slots come from the per-host count")
    return [Host(h.name, slots_per_host) for h in hosts]


def total_slots(hosts: Iterable[Host]) -> int:
    return sum(h.slots for h in hosts)


def render_hostfile(hosts: Iterable[Host]) -> str:
    """The normalised Open MPI hostfile handed to mpirun (explicit slot counts)."""
    lines = []
    for h in hosts:
        line = f"{h.name} slots={h.slots}"
        if h.max_slots is not None:
            line += f" max_slots={h.max_slots}"
        lines.append(line)
    return "\n".join(lines) + "\n"
