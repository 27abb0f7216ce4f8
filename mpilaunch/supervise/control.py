"""The control channel, launcher side: one listening socket per attempt that every rank
adapter connects back to; the launcher's graceful stop and the signals its starter does not
forward go to the adapters over it (protocol and reasons: ``mpilaunch/rank/control.py``;
why it works across hosts: docs/ARCHITECTURE.md, "Signals").

Opened by ``starter.run_attempt`` for every supervised launch (not ``--exec``): besides the graceful
stop and the signals, it is how the launcher learns that an adapter died (its connection
closed without its last word, ``bye``: ``on_dead``) and how ``mpilaunch stacks`` reaches every
rank (:meth:`Control.stacks`; docs/HANGS.md).
"""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

# The C module under socket.py, as the adapter's end of this channel uses it
# (mpilaunch/rank/control.py): socket.py's import builds its enums and loads array in every
# launch before mpirun starts (docs/ARCHITECTURE.md, start-up); this channel needs
# neither, only an accept() (net.listener).
import _socket

from mpilaunch import net
from mpilaunch.rank.control import ENDPOINT_VAR, MAX_LINE, TOKEN_VAR, mac

SEND_TIMEOUT = 2.0


def addresses(hosts: Sequence) -> List[str]:
    """Where the adapters may find this host: loopback when every rank runs here; else this
    host's IPv4 addresses (the one routing to the first other host first, when it is given by
    address), loopback last (for the ranks that run here). Its global IPv6 addresses too when
    the first other host is an IPv6 literal or this host has no IPv4 address (an IPv6-only
    cluster): the socket is then dual-stack (:class:`Control`)."""
    if net.all_here(hosts):
        return [net.LOOPBACK]
    first = []
    for h in hosts:
        if not net.is_here(h):
            literal = net.is_ipv4(h.name) or net.is_ipv6(h.name)
            src = net.route_source(h.name) if literal else None   # no DNS look-up
            first = [src] if src else []
            break
    v4 = net.local_ipv4s()
    v6 = net.local_ipv6s() if (first and ":" in first[0]) or not v4 else []
    out = first + [a for a in v4 + v6 if a not in first and not net.is_loopback(a)]
    return out + [net.LOOPBACK]


class Control:
    """The listening socket and the adapters connected to it (rank -> connection). One thread
    serves them all (accept, each adapter's hello, noticing its end) on one selector, so a
    launch of many ranks costs one file descriptor per rank and no thread per rank."""

    names = (ENDPOINT_VAR, TOKEN_VAR)

    def __init__(self, hosts: Sequence, np: int = 0,
                 on_dead: Optional[Callable[[int, Optional[int], str], None]] = None,
                 on_sample: Optional[Callable[..., None]] = None) -> None:
        import selectors


        _room_for(np)
        _keep_stdio()
        self.token = os.urandom(16).hex()   # secrets.token_hex's, without its import of hmac and OpenSSL
        self.addresses = addresses(hosts)
        bind = net.LOOPBACK if self.addresses == [net.LOOPBACK] else "0.0.0.0"
        if any(":" in a for a in self.addresses):   # dual-stack: IPv6 peers and 127.0.0.1
            self.sock = net.listener(_socket.AF_INET6)
            self.sock.setsockopt(_socket.IPPROTO_IPV6, _socket.IPV6_V6ONLY, 0)
            bind = "::"
        else:
            self.sock = net.listener(_socket.AF_INET)
        self.sock.bind((bind, 0))
        self.sock.listen(min(max(np, 128), 4096))
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.peers: Dict[int, Tuple[_socket.socket, str]] = {}
        self.info: Dict[int, Tuple[int, str]] = {}     # rank -> (adapter pid, its host)
        self.bufs: Dict[int, bytearray] = {}
        self.said_bye: set = set()
        self.on_dead = on_dead      # (rank, pid, host): its connection closed without its bye
        self.on_sample = on_sample  # (monitor.model.Sample): a rank's sample (docs/MONITOR.md)
        self.sample_failed = False
        self.answers: Dict[str, Dict[int, str]] = {}    # stacks request id -> rank -> text
        self.seq = 0
        self.lock = threading.Condition()
        self.closed = False
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = _socket.socketpair()
        self.sel.register(self.sock, selectors.EVENT_READ, ("listen",))
        self.sel.register(self.wake_r, selectors.EVENT_READ, ("wake",))
        self.thread = threading.Thread(target=self._serve, name="control", daemon=True)
        self.thread.start()

    @property
    def env(self) -> Dict[str, str]:
        """For the starter's environment (the backend exports the names to every rank)."""
        return {ENDPOINT_VAR: f"{','.join(self.addresses)}:{self.port}", TOKEN_VAR: self.token}

    def _serve(self) -> None:
        while not self.closed:
            for key, _ in self.sel.select():
                # every file registered is a socket
                kind, conn = key.data[0], cast(_socket.socket, key.fileobj)
                if kind == "listen":
                    self._accept()
                elif kind == "hello":
                    self._hello(conn, key.data[1])
                elif kind == "peer":
                    self._read(conn, key.data[1])
        for key in list(self.sel.get_map().values()):
            cast(_socket.socket, key.fileobj).close()
        self.sel.close()

    def _accept(self) -> None:
        import selectors

        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:     # out of descriptors: that adapter warns and goes without;
                time.sleep(0.05)    # the listening socket stays readable, so do not spin
                return
            conn.setblocking(False)
            self.sel.register(conn, selectors.EVENT_READ, ("hello", bytearray()))

    def _hello(self, conn: _socket.socket, buf: bytearray) -> None:
        import selectors

        try:
            more = conn.recv(MAX_LINE)
        except BlockingIOError:
            return
        except OSError:
            more = b""
        buf += more
        if more and b"\n" not in buf and len(buf) < MAX_LINE:
            return
        try:
            word, rank, nonce, pid, host, tag = (
                bytes(buf).split(b"\n", 1)[0].decode("ascii").split(" "))
            if (word != "hello" or not rank.isdigit() or not nonce.isalnum() or not pid.isdigit()
                    or tag != mac(self.token, nonce, 0, f"hello {rank} {pid} {host}")):
                raise ValueError(buf)
            conn.settimeout(SEND_TIMEOUT)       # sends come from the launcher's main thread
            # the answer and the registration under one lock: an adapter that has read its ok
            # is already a peer (ranks(), send()), and no command can go out before that ok
            with self.lock:
                conn.sendall(f"ok {mac(self.token, nonce, 0, 'ok')}\n".encode())
                old = self.peers.pop(int(rank), None)
                self.peers[int(rank)] = (conn, nonce)
                self.info[int(rank)] = (int(pid), host)
                self.bufs[int(rank)] = bytearray()
                self.said_bye.discard(int(rank))
        except (OSError, ValueError, UnicodeDecodeError):
            self.sel.unregister(conn)
            conn.close()
            return
        self.sel.modify(conn, selectors.EVENT_READ, ("peer", int(rank)))
        if old is not None:
            self._drop(old[0], None)

    def _read(self, conn: _socket.socket, rank: int) -> None:
        """What an adapter says after its hello: ``bye MAC`` (its last word), ``stacks ID LEN
        MAC`` and LEN bytes (an answer), ``sample LEN MAC`` and LEN bytes (a monitor sample,
        rank/monitor.py: to ``on_sample``, outside the lock); its connection's end, with or
        without its bye."""
        try:
            data = conn.recv(65536, _socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            with self.lock:
                dead = (not self.closed and self.peers.get(rank, (None,))[0] is conn
                        and rank not in self.said_bye)
                pid, host = self.info.get(rank, (None, "?"))
            self._drop(conn, rank)
            if dead and self.on_dead is not None:
                self.on_dead(rank, pid, host)
            return
        samples: List[bytes] = []
        with self.lock:
            entry = self.peers.get(rank)
            if entry is None or entry[0] is not conn:
                return
            nonce, buf = entry[1], self.bufs.setdefault(rank, bytearray())
            buf += data
            self._parse(rank, nonce, buf, samples)
            host = self.info.get(rank, (None, "?"))[1]
        for blob in samples:
            self._deliver(blob, host)

    def _parse(self, rank: int, nonce: str, buf: bytearray, samples: List[bytes]) -> None:
        """Every whole message in ``buf`` (under the lock): bye and stacks answers taken here,
        samples' bytes appended to ``samples``."""
        while b"\n" in buf:
            head, _, rest = bytes(buf).partition(b"\n")
            words = head.decode("ascii", "replace").split(" ")
            if words[0] == "bye" and len(words) == 2:
                if words[1] == mac(self.token, nonce, 0, "bye"):
                    self.said_bye.add(rank)
                buf[:] = rest
            elif words[0] == "stacks" and len(words) == 4 and words[2].isdigit():
                size = int(words[2])
                if len(rest) < size:
                    break       # the rest of the answer is on its way
                if words[3] == mac(self.token, nonce, 0, f"stacks {words[1]} {size}"):
                    self.answers.setdefault(words[1], {})[rank] = rest[:size].decode(
                        "utf-8", "replace")
                    self.lock.notify_all()
                buf[:] = rest[size:]
            elif words[0] == "sample" and len(words) == 3 and words[1].isdigit():
                size = int(words[1])
                if len(rest) < size:
                    break       # the rest of the sample is on its way
                if words[2] == mac(self.token, nonce, 0, f"sample {size}"):
                    samples.append(rest[:size])
                buf[:] = rest[size:]
            else:
                buf[:] = rest     # garbled: skipped
            if len(buf) > 64 * 1024 * 1024:
                buf.clear()

    def _deliver(self, blob: bytes, host: str) -> None:
        """One sample to ``on_sample``; a garbled one is dropped, and a consumer's failure is
        said once, never ending this thread (the channel's other duties go on)."""
        if self.on_sample is None:
            return
        from mpilaunch.monitor.model import Sample

        try:
            sample = Sample.from_wire(blob, host)
        except ValueError:
            return
        try:
            self.on_sample(sample)
        except Exception as exc:    # the consumer's bug: said, and the channel goes on
            if not self.sample_failed:
                self.sample_failed = True
                warn(f"the monitor's consumer failed on a sample: {exc!r}")

    def _drop(self, conn: _socket.socket, rank: Optional[int]) -> None:
        try:
            self.sel.unregister(conn)
        except (KeyError, ValueError):
            pass
        conn.close()
        with self.lock:
            if rank is not None and self.peers.get(rank, (None,))[0] is conn:
                del self.peers[rank]
            self.lock.notify_all()

    def ranks(self) -> List[int]:
        with self.lock:
            return sorted(self.peers)

    def all_said_bye(self, np: int) -> bool:
        """Every rank's adapter said its last word (none can be left running)."""
        with self.lock:
            return np > 0 and all(r in self.said_bye for r in range(np))

    def wait_gone(self, timeout: float, lost: Optional[Callable[[], List[str]]] = None) -> List[int]:
        """Wait up to ``timeout`` s for every connected adapter to end (its end of the
        connection closes with its process); the ranks still connected then. The adapters on
        a host in ``lost()`` (the starter's lost hosts, asked again as its words come in) are
        not waited for: a host whose link died leaves their connections open, silent, and
        waiting for them only delays what comes next (a relaunch on the hosts left)."""
        end = time.monotonic() + timeout
        while True:
            skip = self.on_hosts(lost()) if lost is not None else set()
            with self.lock:
                left = sorted(set(self.peers) - skip)
                remaining = end - time.monotonic()
                if not left or remaining <= 0:
                    return left
                self.lock.wait(min(remaining, 0.1) if lost is not None else remaining)

    def on_hosts(self, names: Sequence[str]) -> "set[int]":
        """The connected ranks whose adapter runs on a host named in ``names`` (as the
        adapter names its host, its first label, or the address it connected from)."""
        wanted = set(names)
        if not wanted:
            return set()
        out = set()
        with self.lock:
            for rank, (conn, _) in self.peers.items():
                host = self.info.get(rank, (0, ""))[1]
                try:
                    addr = str(conn.getpeername()[0])
                except (OSError, IndexError):
                    addr = ""
                if wanted & {host, host.split(".")[0], addr}:
                    out.add(rank)
        return out

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
                    pass        # ending: the serve thread notices
        return sorted(reached)

    def host_of(self, rank: int) -> str:
        with self.lock:
            return self.info.get(rank, (None, "?"))[1]

    def stacks(self, timeout: float, native: bool = False) -> Tuple[Dict[int, str], List[int]]:
        """Every connected adapter's stacks (``stacks ID``, answered by rank/stacks.py on its
        own host): (rank -> text, the ranks asked), within ``timeout`` s."""
        import secrets

        ident = secrets.token_hex(6)
        asked = self.send(f"stacks {ident}" + (" native" if native else ""))

        def all_in() -> bool:     # every rank asked answered, or its adapter has gone
            got = self.answers.get(ident, {})
            return all(r in got or r not in self.peers for r in asked)

        with self.lock:
            self.lock.wait_for(all_in, timeout)
            return dict(self.answers.pop(ident, {})), asked

    def signal(self, signum: int) -> List[int]:
        return self.send(f"sig {int(signum)}")

    def stop(self, grace: Optional[float] = None) -> List[int]:
        """The graceful stop to every adapter; ``grace``: the seconds its workers get (None:
        the adapter's own ``--term-grace``)."""
        return self.send("stop" if grace is None else f"stop {grace:g}")

    def close(self) -> None:
        """Stop serving; every socket is closed by the serve thread, which ends at once."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.peers = {}
        try:
            self.wake_w.send(b"x")
        except OSError:
            pass
        self.thread.join(2)
        self.wake_w.close()


def _keep_stdio() -> None:
    """A closed fd 0, 1 or 2 gets /dev/null: else one of this channel's sockets takes its number,
    and the starter, which inherits the launcher's fd 0, reads its stdin from it (seen: an MPI
    program's rank 0 waited in input() for ever when mpilaunch ran with fd 0 closed). The
    launcher treats a closed stdin and /dev/null alike (supervise/relays.stdin_target)."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)    # the lowest free number: this one


def _room_for(np: int) -> None:
    """One descriptor per rank: raise the soft limit towards the hard one when ``np`` needs it."""
    want = np + 256
    # sysconf reads the soft limit too (-1: unlimited) without importing resource: a launch of
    # a few ranks needs no more (docs/ARCHITECTURE.md, start-up)
    if not 0 <= os.sysconf("SC_OPEN_MAX") < want:
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(hard, want)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, new), hard))
        except (ValueError, OSError):
            pass


def missing(reached: List[int], np: int) -> str:
    """'' when every rank was reached, else the note naming those that were not."""
    left = sorted(set(range(np)) - set(reached))
    if not left:
        return ""
    shown = ", ".join(str(r) for r in left[:8]) + (", ..." if len(left) > 8 else "")
    return f" (not reached: rank {shown}: not connected to the launcher's control port)"


def warn(text: str) -> None:
    print(f"mpilaunch: {text}", file=sys.stderr, flush=True)
