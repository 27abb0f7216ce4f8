"""This machine's interface addresses, from ``getifaddrs(3)`` through ctypes.

What ``psutil.net_if_addrs()`` gives for IPv4/IPv6, without importing psutil (the launcher's
"is this host here?", ``net.is_here``, and a multi-host rank's interface look-up would pay for
that import: docs/ARCHITECTURE.md, start-up); ctypes is loaded only by what calls this.
Linux only, as is every other part of mpilaunch that reads the machine. Also the IPv6 routing
table's interface towards an address (:func:`route_interface6`; IPv4's is in net.py).
"""
from __future__ import annotations

import ctypes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple

AF_INET, AF_INET6 = 2, 10   # Linux values (socket.AF_INET, socket.AF_INET6)


class _Sockaddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 26)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [
    ("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
    ("addr", ctypes.POINTER(_Sockaddr)), ("netmask", ctypes.POINTER(_Sockaddr)),
    ("ifu", ctypes.POINTER(_Sockaddr)), ("data", ctypes.c_void_p)]


def addresses() -> List[Tuple[str, int, str]]:
    """[(interface, AF_INET or AF_INET6, address text)], grouped by interface in the order
    the interfaces first appear (psutil's order), IPv6 without a ``%scope`` suffix. Raises
    OSError when getifaddrs fails."""
    import _socket   # inet_ntop, without the socket module's enum set-up

    libc = ctypes.CDLL(None, use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "getifaddrs failed")
    by_name: Dict[str, List[Tuple[str, int, str]]] = {}
    try:
        node = head
        while node:
            ifa = node.contents
            out = by_name.setdefault(ifa.name.decode(errors="replace"), [])
            if ifa.addr:
                family = ifa.addr.contents.family
                raw = bytes(ifa.addr.contents.data)
                if family == AF_INET:       # sin_port (2), sin_addr (4)
                    out.append((ifa.name.decode(errors="replace"), family,
                                _socket.inet_ntop(AF_INET, raw[2:6])))
                elif family == AF_INET6:    # sin6_port (2), flowinfo (4), sin6_addr (16)
                    out.append((ifa.name.decode(errors="replace"), family,
                                _socket.inet_ntop(AF_INET6, raw[6:22])))
            node = ifa.next
    finally:
        libc.freeifaddrs(head)
    return [entry for entries in by_name.values() for entry in entries]


def route_interface6(dest: str, table: str) -> Optional[str]:
    """net.route_interface for an IPv6 ``dest``, from ``/proc/net/ipv6_route`` (per line:
    destination, prefix length, source, its length, next hop, metric, refcount, use, flags,
    interface; hex): the most specific route up, lowest metric among equals. The table holds
    the local routes too: for one of this host's own addresses that is ``lo``."""
    import _socket

    want = int.from_bytes(_socket.inet_pton(_socket.AF_INET6, dest), "big")
    best = None
    try:
        with open(table, encoding="ascii", errors="replace") as fh:
            for line in fh:
                f = line.split()
                if len(f) < 10:
                    continue
                try:
                    dst, plen, metric, flags = int(f[0], 16), int(f[1], 16), int(f[5], 16), int(f[8], 16)
                except ValueError:
                    continue
                mask = ((1 << 128) - 1) ^ ((1 << (128 - plen)) - 1) if plen else 0
                if not flags & 1 or want & mask != dst or flags & 0x200:   # RTF_UP; RTF_REJECT
                    continue
                key = (plen, -metric)
                if best is None or key > best[0]:
                    best = (key, f[9])
    except OSError:
        return None
    return best[1] if best else None
