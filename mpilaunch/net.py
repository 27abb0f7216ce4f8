"""Network facts both sides use, each decided here once: the launcher (rankcheck, config,
check, job, ssh) and the rank adapter (rank/agree.py) call the same functions.

* **Names and addresses**: :data:`LOOPBACK`, :func:`is_loopback`, :func:`ipv4s` (a name's
  IPv4 addresses, the resolver's order), :func:`resolve_ipv4` (rank 0's address for a
  ``--master-addr``: the resolver's first answer), :func:`resolve` (every address, with a
  time-out), :func:`route_source` (the local address towards a destination).
* **Ports**: :func:`check_local_addr` and :func:`check_port` (can the scheduler bind there? a
  refusal is a :class:`PortError` carrying its ``kind``), :func:`free_port`.
* **This machine**: :func:`local_addresses`, :func:`local_ipv4s`, and the one "is this host
  here" rule, :func:`is_here` (no DNS), with :func:`all_here`, :func:`rank0_is_here` and
  :func:`spans_machines` built on it.

Every rank imports this module: it imports only ``os`` and ``mpilaunch.errors`` at import
time; ``socket``, ``errno`` and ``threading`` are imported by the functions that use them
(docs/ARCHITECTURE.md, "How the adapter starts").
"""
from __future__ import annotations

import os

TYPE_CHECKING = False   # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from mpilaunch.errors import UsageError

LOOPBACK = "127.0.0.1"
# Names that are this machine whatever its host name (as /etc/hosts spells them on Debian).
LOCAL_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
MASTER_ADDR_FIX = "give rank 0's host name or one of its addresses (or leave it out)"

# The kinds of PortError: what a caller needs to word its own message.
PORT_IN_USE = "already in use"
PORT_NOT_ALLOWED = "not allowed"
ADDR_NOT_HERE = "not an address of this host"


class PortError(UsageError):
    """The scheduler could not bind: ``kind`` is :data:`PORT_IN_USE`, :data:`PORT_NOT_ALLOWED`
    or :data:`ADDR_NOT_HERE`; ``addr`` and ``port`` what was tried. The message is the rank
    adapter's; the launcher words its own from ``kind`` (rankcheck.py)."""

    def __init__(self, message: str, kind: str, addr: str, port: int):
        super().__init__(message)
        self.kind, self.addr, self.port = kind, addr, port


# --------------------------------------------------------------------------- names, addresses

def is_loopback(addr: str) -> bool:
    return addr.startswith("127.") or addr == "::1"


def is_ipv4(text: Optional[str]) -> bool:
    """``text`` is an IPv4 address in dotted-quad form (inet_pton's rule: no leading zeros, no
    short forms), what the resolver gives back unchanged. Through ``_socket``: every rank asks."""
    if not text:
        return False
    import _socket

    try:
        return bool(_socket.inet_pton(_socket.AF_INET, text))
    except (OSError, TypeError, ValueError):
        return False


def is_ipv6(text: Optional[str]) -> bool:
    """``text`` is an IPv6 address (no brackets, no zone index)."""
    if not text or "%" in text:
        return False
    import _socket

    try:
        return bool(_socket.inet_pton(_socket.AF_INET6, text))
    except (OSError, TypeError, ValueError):
        return False


def url_host(addr: str) -> str:
    """``addr`` as the host part of a URL or ``host:port``: an IPv6 literal in brackets."""
    return f"[{addr}]" if ":" in addr and not addr.startswith("[") else addr


def family_of(addr: str) -> int:
    """The socket family of an address literal (IPv6 when it has a colon)."""
    import _socket

    return _socket.AF_INET6 if ":" in addr else _socket.AF_INET


def ipv4s(name: str) -> List[str]:
    """``name``'s IPv4 addresses in the resolver's order (``/etc/gai.conf`` preference), an
    address given as text being its own; ``[]`` when it does not resolve."""
    import socket

    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(i[4][0]) for i in infos))   # AF_INET: (address text, port)


def resolve_ipv4(name: str, flag: str = "--master-addr") -> str:
    """The address rank 0's scheduler uses for ``--master-addr NAME``: an address given as
    text is its own (IPv4 or IPv6, brackets dropped); else the resolver's first IPv4 answer,
    the one any other program connecting to NAME tries first, or, for a name that has only
    IPv6 addresses (an IPv6-only cluster), its first IPv6 answer. UsageError naming ``flag``
    when NAME has none."""
    if is_ipv4(name):   # its own answer: no resolver, no socket module (every rank)
        return name
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    if is_ipv6(bare):
        return bare
    import socket

    why = ""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            infos = socket.getaddrinfo(name, None, family, socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            infos = []
            why = why or str(exc.args[1] if isinstance(exc, socket.gaierror)
                             and len(exc.args) > 1 else exc)
        if infos:
            return str(infos[0][4][0])   # (address text, port, ...)
    raise UsageError(f"{flag}={name!r}: does not resolve to an address ({why or 'no address'}); "
                     f"{MASTER_ADDR_FIX}")


def resolve(name: str, timeout: float) -> Tuple[Optional[List[str]], Optional[str]]:
    """Every address of ``name`` (IPv4 first), the look-up bounded by ``timeout`` (it runs in
    a daemon thread). -> (addrs, None) or (None, why)."""
    import socket
    import threading

    box: dict = {}

    def lookup() -> None:
        try:
            infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
            v4 = [i[4][0] for i in infos if i[0] == socket.AF_INET]
            v6 = [i[4][0] for i in infos if i[0] == socket.AF_INET6]
            box["addrs"] = list(dict.fromkeys(v4 + v6))
        except (UnicodeError, OSError) as exc:
            box["error"] = str(exc.args[1] if isinstance(exc, socket.gaierror)
                               and len(exc.args) > 1 else exc)

    t = threading.Thread(target=lookup, name=f"resolve-{name}", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return None, f"name lookup took more than {timeout:g}s — check DNS (/etc/resolv.conf)"
    if "error" in box:
        return None, str(box["error"])
    addrs = box.get("addrs") or []
    if not addrs:
        return None, "no address"
    return list(addrs), None


def route_source(dest: str) -> Optional[str]:
    """The local address the kernel would use to reach ``dest`` (UDP connect: sends nothing)."""
    import _socket as socket   # the socket module's enum set-up is not needed here

    s = socket.socket(family_of(dest), socket.SOCK_DGRAM)
    try:
        s.connect((dest, 9))
        return s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()


def route_interface(dest: str, table: str = "/proc/net/route") -> Optional[str]:
    """The interface of the main routing table's most specific route to the IPv4 address
    ``dest`` (lowest metric among equals), read from ``table``; None when ``dest`` is not an
    address, no route is up for it, or the table cannot be read. Policy rules (``ip rule``)
    are not seen here. A file read, where asking the kernel needs the socket and ctypes
    modules (every rank of a multi-host launch asks: docs/ARCHITECTURE.md, start-up)."""
    if is_ipv6(dest):   # the IPv6 table: netif.py reads it
        from mpilaunch import netif

        return netif.route_interface6(dest, "/proc/net/ipv6_route" if table == "/proc/net/route" else table)
    if not is_ipv4(dest):
        return None
    import sys

    want = int.from_bytes(bytes(int(p) for p in dest.split(".")), sys.byteorder)
    best = None
    try:
        with open(table, encoding="ascii", errors="replace") as fh:
            next(fh, None)   # the header
            for line in fh:
                f = line.split()
                if len(f) < 8:
                    continue
                try:
                    dst, flags, metric, mask = int(f[1], 16), int(f[3], 16), int(f[6]), int(f[7], 16)
                except ValueError:
                    continue
                if not flags & 1 or want & mask != dst:   # RTF_UP; the route covers dest
                    continue
                key = (bin(mask).count("1"), -metric)
                if best is None or key > best[0]:
                    best = (key, f[0])
    except OSError:
        return None
    return best[1] if best else None


# --------------------------------------------------------------------------- ports

def check_local_addr(addr: str, hostname: str) -> None:
    """The scheduler can bind ``addr`` on this host (loopback always can). PortError
    :data:`ADDR_NOT_HERE` otherwise."""
    if is_loopback(addr):
        return
    import errno
    import _socket as socket   # the socket module's enum set-up is not needed here

    s = socket.socket(family_of(addr), socket.SOCK_STREAM)
    try:
        s.bind((addr, 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise PortError(f"--master-addr {addr} is not an address of rank 0's host "
                            f"{hostname}; the scheduler runs there", ADDR_NOT_HERE, addr, 0) from None
        raise
    finally:
        s.close()


def check_port(addr: str, port: int, hostname: str, check_addr: bool = True) -> int:
    """Rank 0's check that the scheduler can bind ``addr:port``; returns the port (picked
    when 0). The bind is on the wildcard address with ``SO_REUSEADDR``, as the scheduler
    binds, so a port only in ``TIME_WAIT`` from the previous run is not refused. PortError
    :data:`PORT_IN_USE` / :data:`PORT_NOT_ALLOWED` (and :func:`check_local_addr`'s)."""
    import errno
    import _socket as socket   # the socket module's enum set-up is not needed here

    if check_addr:
        check_local_addr(addr, hostname)
    v6 = ":" in addr   # an IPv6 scheduler binds an IPv6 socket (MindSpore's, torch's store)
    s = socket.socket(socket.AF_INET6 if v6 else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("::" if v6 else "0.0.0.0", port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                kind = PORT_IN_USE if exc.errno == errno.EADDRINUSE else PORT_NOT_ALLOWED
                raise PortError(
                    f"--master-port {port} is {kind} on host {hostname} (rank 0, scheduler "
                    f"address {addr}); pick another port or use --master-port 0",
                    kind, addr, port) from None
            raise
        return s.getsockname()[1]
    finally:
        s.close()


_LISTENER: Any = None   # the class below, made once by the first listener()


def listener(family: int) -> Any:
    """A stream socket with socket.py's ``accept()`` through ``_socket``: socket.py's import is
    then not in every launch (docs/ARCHITECTURE.md, start-up; supervise/control.py, stacks/)."""
    global _LISTENER
    import _socket
    if _LISTENER is None:
        class Listener(_socket.socket):
            def accept(self) -> Tuple[Any, Any]:
                fd, address = self._accept()   # type: ignore[attr-defined]  # C's, not in stubs
                return _socket.socket(fileno=fd), address
        _LISTENER = Listener
    return _LISTENER(family, _socket.SOCK_STREAM)


def free_port() -> int:
    """A TCP port free on this machine now (bound and released the way rank 0's check binds)."""
    return check_port(LOOPBACK, 0, "", check_addr=False)


# --------------------------------------------------------------------------- this machine

_CACHE: dict = {}


def hostname() -> str:
    """This machine's host name (``socket.gethostname()``, without importing socket)."""
    return os.uname().nodename


def local_addresses() -> frozenset:
    """Every address of this machine's interfaces (IPv4 and IPv6); read once per process."""
    if "addrs" not in _CACHE:
        from mpilaunch import netif

        try:
            _CACHE["addrs"] = frozenset(address for _, _, address in netif.addresses())
        except OSError:  # pragma: no cover - getifaddrs does not fail on Linux
            _CACHE["addrs"] = frozenset()
    return _CACHE["addrs"]


def local_ipv4s() -> List[str]:
    """Non-loopback, non-link-local IPv4 addresses of this host, interface order."""
    from mpilaunch import netif

    out: List[str] = []
    for _, family, address in netif.addresses():
        if family == netif.AF_INET and not address.startswith(("127.", "169.254.")):
            if address not in out:
                out.append(address)
    return out


def local_ipv6s() -> List[str]:
    """Non-loopback, non-link-local (fe80::/10) IPv6 addresses of this host, interface order:
    the addresses of an IPv6-only host that another host can reach."""
    from mpilaunch import netif

    out: List[str] = []
    for _, family, address in netif.addresses():
        if (family == netif.AF_INET6 and address != "::1" and "%" not in address
                and not address.lower().startswith(("fe8", "fe9", "fea", "feb"))):
            if address not in out:
                out.append(address)
    return out


def is_here(host: Any, addrs: Iterable[str] = ()) -> bool:
    """The one rule for "is this host this machine": ``host`` (a name, or anything with a
    ``name``, such as hostfile.Host) is ``localhost`` or the like, this machine's host name
    (full or short), or an address of it (loopback or an interface's); so is any of ``addrs``
    (the name's addresses, when the caller has resolved it). No DNS look-up here. An entry
    with an ssh port of its own never is: one address may stand for several containers, each
    with its sshd on its own port (config/sshconfig.py), so it is reached over ssh."""
    if getattr(host, "port", None) is not None:
        return False
    name = getattr(host, "name", host)
    low = name.lower()
    if low in LOCAL_NAMES:
        return True
    own = hostname().lower()
    if low in (own, own.split(".")[0]):
        return True
    for a in (name, *addrs):
        if is_loopback(a) or a in local_addresses():
            return True
    return False


def all_here(hosts: Sequence) -> bool:
    """Every host of the job is this machine."""
    return all(is_here(h) for h in hosts)


def rank0_is_here(hosts: Sequence) -> bool:
    """Rank 0 (the first slot of the first host: mpirun maps by slot) runs on this machine."""
    return bool(hosts) and is_here(hosts[0])


def spans_machines(hosts: Sequence) -> bool:
    """The ranks may run on more than one machine: several hosts listed, not all this one
    (two names of one remote machine cannot be told apart without DNS: counted as two)."""
    return len(hosts) > 1 and not all_here(hosts)


def rank0_address(hosts: Sequence[Any], node_addr: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
    """Rank 0's address for the scheduler, decided by the launcher once instead of by the
    ranks' MPI agreement (MPI_Init in every adapter), or None to leave it to the agreement.

    * Rank 0 runs here and some ranks elsewhere: the address of this host that the first
      other host routes to (what the agreement would pick).
    * Rank 0 runs on another host (a launcher outside the hostfile: mpi-operator's launcher
      pod, a login node): that host's own address, when the hostfile gives it as one; the
      launcher's ssh and Open MPI's daemons reach it there, and so do the other ranks.

    A host given by name is looked up nowhere here (a look-up could wait on DNS); only
    ``node_addr`` (name -> the address the scheduler knows for it: Slurm's NodeAddr) is asked,
    for that one host."""
    if not hosts:
        return None
    first = hosts[0]
    def literal(addr: str) -> bool:
        return is_ipv4(addr) or is_ipv6(addr)

    if not is_here(first):
        addr = first.name if literal(first.name) else node_addr(first.name) if node_addr else None
        return addr if addr is not None and literal(addr) and not is_loopback(addr) else None
    for h in hosts[1:]:
        if is_here(h):
            continue
        addr = h.name if literal(h.name) else node_addr(h.name) if node_addr else None
        return route_source(addr) if addr is not None and literal(addr) else None
    return None

