"""The control channel, launcher side: one listening socket per attempt that every rank
adapter connects back to; the launcher's graceful stop and the signals its starter does not
forward go to the adapters over it (protocol and reasons: ``mpilaunch/rank/control.py``;
why it works across hosts: docs/ARCHITECTURE.md, "Signals").

Opened by ``launcher.run`` only when the attempt needs it (--term-grace, or a backend that
does not forward one of SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT); a plain Open MPI launch has none.
"""
from __future__ import annotations

import socket
import sys
import threading
from typing import Dict, List, Sequence, Tuple

from mpilaunch.rank.control import ENDPOINT_VAR, MAX_LINE, TOKEN_VAR, mac

HELLO_TIMEOUT = 5.0
SEND_TIMEOUT = 2.0


def addresses(hosts: Sequence) -> List[str]:
    """Where the adapters may find this host: loopback when every rank runs here; else this
    host's IPv4 addresses (the one routing to the first other host first, when it is given by
    address), loopback last (for the ranks that run here)."""
    from mpilaunch import net

    if net.all_here(hosts):
        return [net.LOOPBACK]
    first = []
    for h in hosts:
        if not net.is_here(h):
            src = net.route_source(h.name) if _ipv4(h.name) else None   # no DNS look-up
            first = [src] if src else []
            break
    out = first + [a for a in net.local_ipv4s() if a not in first and not net.is_loopback(a)]
    return out + [net.LOOPBACK]


def _ipv4(text: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET, text)
        return True
    except OSError:
        return False


class Control:
    """The listening socket and the adapters connected to it (rank -> connection)."""

    def __init__(self, hosts: Sequence):
        import secrets

        from mpilaunch import net

        self.token = secrets.token_hex(16)
        self.addresses = addresses(hosts)
        bind = net.LOOPBACK if self.addresses == [net.LOOPBACK] else "0.0.0.0"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((bind, 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        self.peers: Dict[int, Tuple[socket.socket, str]] = {}
        self.seq = 0
        self.lock = threading.Lock()
        self.closed = False
        threading.Thread(target=self._accept, name="control-accept", daemon=True).start()

    @property
    def env(self) -> Dict[str, str]:
        """For the starter's environment (the backend exports the names to every rank)."""
        return {ENDPOINT_VAR: f"{','.join(self.addresses)}:{self.port}", TOKEN_VAR: self.token}

    names = (ENDPOINT_VAR, TOKEN_VAR)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return      # closed
            threading.Thread(target=self._hello, args=(conn,), daemon=True).start()

    def _hello(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(HELLO_TIMEOUT)
            data = b""
            while b"\n" not in data and len(data) < MAX_LINE:
                more = conn.recv(MAX_LINE)
                if not more:
                    raise OSError("closed")
                data += more
            word, rank, nonce = data.split(b"\n", 1)[0].decode("ascii").split(" ")
            if word != "hello" or not rank.isdigit() or not nonce.isalnum():
                raise ValueError(data)
            conn.sendall(f"ok {mac(self.token, nonce, 0, 'ok')}\n".encode())
            conn.settimeout(SEND_TIMEOUT)
        except (OSError, ValueError, UnicodeDecodeError):
            conn.close()
            return
        with self.lock:
            if self.closed:
                conn.close()
                return
            old = self.peers.pop(int(rank), None)
            self.peers[int(rank)] = (conn, nonce)
        if old is not None:
            old[0].close()

    def ranks(self) -> List[int]:
        with self.lock:
            return sorted(self.peers)

    def send(self, command: str) -> List[int]:
        """``command`` to every connected adapter; the ranks it reached."""
        reached = []
        with self.lock:
            self.seq += 1
            for rank, (conn, nonce) in list(self.peers.items()):
                line = f"{self.seq} {command} {mac(self.token, nonce, self.seq, command)}\n"
                try:
                    conn.sendall(line.encode())
                    reached.append(rank)
                except OSError:
                    conn.close()
                    del self.peers[rank]
        return sorted(reached)

    def signal(self, signum: int) -> List[int]:
        return self.send(f"sig {int(signum)}")

    def stop(self) -> List[int]:
        return self.send("stop")

    def close(self) -> None:
        with self.lock:
            self.closed = True
            peers, self.peers = list(self.peers.values()), {}
        try:
            self.sock.shutdown(socket.SHUT_RDWR)   # wakes the accept thread
        except OSError:
            pass
        self.sock.close()
        for conn, _ in peers:
            conn.close()


def missing(reached: List[int], np: int) -> str:
    """'' when every rank was reached, else the note naming those that were not."""
    left = sorted(set(range(np)) - set(reached))
    if not left:
        return ""
    shown = ", ".join(str(r) for r in left[:8]) + (", ..." if len(left) > 8 else "")
    return f" (not reached: rank {shown}: not connected to the launcher's control port)"


def warn(text: str) -> None:
    print(f"mpilaunch: {text}", file=sys.stderr, flush=True)
