"""This machine's interface addresses, from ``getifaddrs(3)`` through ctypes.

What ``psutil.net_if_addrs()`` gives for IPv4/IPv6, without importing psutil (the launcher's
"is this host here?", ``net.is_here``, and a multi-host rank's interface look-up would pay for
that import: docs/ARCHITECTURE.md, start-up); ctypes is loaded only by what calls this.
Linux only, as is every other part of mpilaunch that reads the machine.
"""
from __future__ import annotations

import ctypes

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Tuple

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
    by_name = {}
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
