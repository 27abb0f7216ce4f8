"""Rank 0's next rendezvous port, bound by its adapter the moment a restart is decided and handed
to rank 0's spare (prestart.py ``Spare.listen``; spare.py ``_listen`` serves it)."""
from __future__ import annotations

import socket

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional


def store_port(port: int) -> Optional[socket.socket]:
    """``port`` bound and listening on every address, as torch's TCPStore server binds it (IPv6
    with IPv4 mapped where the host has IPv6, else IPv4), for rank 0's spare to serve
    (TCPStore's ``master_listen_fd``); None if it cannot be bound (the spare then binds it
    itself, once it has torch, as the script would)."""
    for family, anywhere in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind((anywhere, port))
            sock.listen(socket.SOMAXCONN)
            return sock
        except OSError:
            sock.close()
    return None
