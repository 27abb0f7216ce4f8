"""The control channel, rank side: the launcher's graceful stop and the signals the starter
does not forward, on a connection this adapter opens back to the launcher.

Why a connection and not a signal: no signal is forwarded to every rank by every starter
(docs/OPENMPI_FACTS.md section 16: Open MPI forwards SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT;
Hydra's mpiexec SIGUSR1 only on MPICH, and dies of SIGUSR2; srun SIGUSR1 and SIGUSR2), and a
signal the user may send cannot also mean "stop gracefully". The launch carries two variables
in the ranks' environment (through the starter's environment, never a file or an argv):

* ``MPILAUNCH_CONTROL=ADDR[,ADDR...]:PORT``: the launcher's listening socket, at each of the
  launching host's addresses (the adapter takes the first one that answers as the launcher);
* ``MPILAUNCH_CONTROL_TOKEN``: a random per-attempt key (a secret by its name,
  ``contract.is_secret``: masked everywhere).

The adapter takes both out of its workers' environment, connects, and says ``hello RANK
NONCE PID HOST MAC`` (MAC over "hello RANK PID HOST": a stranger cannot speak for a rank);
the launcher answers ``ok MAC`` (proof that it holds the key, so a stranger listening at one
of the addresses is skipped). Each command after that is ``SEQ CMD MAC`` with MAC =
HMAC-SHA256(key, "NONCE SEQ CMD") and SEQ increasing: a command cannot be forged, replayed or
moved to another connection. Commands: ``stop`` (the graceful stop), ``sig N`` (signal N to
every descendant of this adapter: the workers, the scheduler and what they started; the
adapter itself is not signalled, so it can still take the next command) and ``stacks ID``
(py-spy on this rank's worker and scheduler, ``rank/stacks.py``; the answer is ``stacks ID
LEN MAC`` and LEN bytes of text). The other way, unasked: ``sample LEN MAC`` and LEN bytes, the
monitor's measurement of a child (rank/monitor.py; MAC over "sample LEN", as the stacks answer's).

The adapter's last word is ``bye MAC``, sent as it leaves (:func:`bye`): a connection that
closes without it is an adapter that died (SIGKILL, a crash), which the launcher then ends
the job for, as for a failed rank (docs/HANGS.md). The other way round, the launcher closes
the connections only once the attempt's starter has ended (or as the launcher itself dies):
an adapter still running then has outlived its job (its daemon ended without it, on any host)
and ends its rank (``on_gone``), as for a SIGTERM.

Everything runs in one daemon thread started with the teardown signals blocked (the main
thread must get them); it uses ``_socket`` and ``_sha256`` themselves (``socket.py``'s and
``hmac``'s imports would cost every rank: docs/ARCHITECTURE.md, start-up; and hmac's import of
warnings once held a lock across a fork: rank/spawn.py).
"""
from __future__ import annotations

import os
import _signal as signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)
import threading

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from _socket import socket
    from hashlib import _Hash
    from typing import Callable, Dict, List, Optional, Tuple

    Channel = Tuple[str, str]   # (endpoint, token): what take() gives

from mpilaunch.pdeathsig import SignalsBlocked
from mpilaunch.rank import status

ENDPOINT_VAR = "MPILAUNCH_CONTROL"
TOKEN_VAR = "MPILAUNCH_CONTROL_TOKEN"
CONNECT_TIMEOUT = 3.0       # per address; a blackholed address costs this much, once
MAX_LINE = 512


def _sha256() -> Callable[[bytes], _Hash]:
    try:
        from _sha256 import sha256      # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256    # 3.12 and later
        except ImportError:
            from hashlib import sha256
    return sha256


def mac(token: str, nonce: str, seq: int, command: str) -> str:
    """HMAC-SHA256(token, "NONCE SEQ COMMAND") in hex (RFC 2104, as ``hmac.new`` computes it)."""
    sha256 = _sha256()
    key = token.encode()
    if len(key) > 64:
        key = sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = sha256(bytes(k ^ 0x36 for k in key) + f"{nonce} {seq} {command}".encode()).digest()
    return sha256(bytes(k ^ 0x5C for k in key) + inner).hexdigest()


def parse_endpoint(text: str) -> Tuple[List[str], int]:
    """``a,b:port`` -> (["a", "b"], port); ValueError when malformed."""
    addrs, sep, port = text.rpartition(":")
    if not sep or not addrs:
        raise ValueError(text)
    return [a for a in addrs.split(",") if a], int(port)


def take(env: Dict[str, str]) -> Optional[Channel]:
    """Remove the channel's variables from ``env`` (the workers must not inherit the key):
    (endpoint, token), or None when the launch has no channel."""
    endpoint, token = env.pop(ENDPOINT_VAR, None), env.pop(TOKEN_VAR, None)
    if endpoint and not token:      # seen on MPICH's remote hosts: said, not silently ignored
        import sys

        sys.stderr.write(f"mpilaunch.rank: {ENDPOINT_VAR} came without {TOKEN_VAR}: the starter "
                         "did not pass the key to this rank; the launcher's graceful stop and "
                         "the signals it delivers itself will not reach it\n")
    if not endpoint or not token:
        return None
    return endpoint, token


def _readline(sock: socket, buf: bytearray) -> Optional[str]:
    while b"\n" not in buf:
        data = sock.recv(MAX_LINE)
        if not data:
            return None
        buf += data
        if len(buf) > 4 * MAX_LINE:
            return None
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line.decode("ascii", "replace")


_LINK: Optional[Link] = None      # this adapter's Link, for bye()


def bye() -> None:
    """The adapter's last word, as it leaves: without it the launcher takes the closed
    connection for a dead adapter. Waits up to 1 s for a connection still being made."""
    link = _LINK
    if link is not None:
        link.say_bye()


class Link(threading.Thread):
    """The adapter's end of the channel. ``on_stop([grace])``: the launcher asked for the
    graceful stop (``stop G``: with G s of grace); every ``sig N`` is delivered to this
    adapter's descendants here; ``stacks ID`` is answered with this rank's stacks (``stacks()``
    -> text, run in a thread of its own)."""

    def __init__(self, channel: Channel, rank: int, on_stop: Callable[..., None],
                 warn: Callable[[str], None], stacks: Optional[Callable[[], str]] = None,
                 on_gone: Optional[Callable[[], None]] = None) -> None:
        global _LINK
        super().__init__(name="control", daemon=True)
        self.endpoint, self.token = channel
        self.rank, self.on_stop, self.warn, self.stacks = rank, on_stop, warn, stacks
        self.on_gone = on_gone      # the launcher closed the connection while this rank runs
        self.leaving = False        # this adapter said its last word
        self.pid = os.getpid()      # whose descendants get the signals
        self.connected = threading.Event()
        self.done = threading.Event()    # connected, or given up
        self.sock: Optional[socket] = None
        self.nonce: Optional[str] = None
        self.send_lock = threading.Lock()
        _LINK = self

    def start(self) -> None:
        with SignalsBlocked():
            super().start()

    def _connect(self) -> Optional[Tuple[socket, str, bytearray]]:
        import _socket

        try:
            addrs, port = parse_endpoint(self.endpoint)
        except ValueError:
            self.warn(f"{ENDPOINT_VAR}={self.endpoint!r} is not ADDR[,ADDR...]:PORT")
            return None
        nonce = os.urandom(16).hex()
        host = os.uname().nodename
        said = f"hello {self.rank} {self.pid} {host}"
        hello = f"hello {self.rank} {nonce} {self.pid} {host} {mac(self.token, nonce, 0, said)}\n"
        for addr in addrs:
            sock = _socket.socket(_socket.AF_INET6 if ":" in addr else _socket.AF_INET,
                                  _socket.SOCK_STREAM)
            try:
                sock.settimeout(CONNECT_TIMEOUT)
                sock.connect((addr, port))
                sock.sendall(hello.encode())
                buf = bytearray()
                line = _readline(sock, buf)
                if line == f"ok {mac(self.token, nonce, 0, 'ok')}":
                    sock.settimeout(None)
                    return sock, nonce, buf
            except OSError:
                pass
            sock.close()    # not the launcher (or it did not prove the key): the next address
        self.warn(f"cannot reach the launcher's control port at {self.endpoint}: its graceful "
                  "stop and the signals it delivers itself will not reach this rank")
        return None

    def send(self, data: bytes) -> bool:
        with self.send_lock:
            if self.sock is None:
                return False
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                return False

    def send_sample(self, data: bytes) -> bool:
        """One monitor sample (``Sample.to_wire()``) to the launcher; False when not connected."""
        nonce = self.nonce
        if nonce is None:
            return False
        head = f"sample {len(data)} {mac(self.token, nonce, 0, f'sample {len(data)}')}\n"
        return self.send(head.encode() + data)

    def say_bye(self) -> None:
        self.leaving = True
        self.done.wait(1.0)
        if self.nonce is not None:
            self.send(f"bye {mac(self.token, self.nonce, 0, 'bye')}\n".encode())

    def run(self) -> None:
        try:
            got = self._connect()
        finally:
            if self.sock is None:
                self.done.set()
        if got is None:
            return
        sock, nonce, buf = got
        self.sock, self.nonce = sock, nonce
        self.connected.set()
        self.done.set()
        last = 0
        gone = False
        try:
            while True:
                line = _readline(sock, buf)
                if line is None:
                    gone = True     # the launcher is gone, or has ended its attempt
                    return
                seq, _, rest = line.partition(" ")
                command, _, tag = rest.rpartition(" ")
                if not seq.isdigit() or int(seq) <= last or tag != mac(self.token, nonce, int(seq), command):
                    continue        # forged, replayed or garbled: ignored
                last = int(seq)
                self.act(command)
        except OSError:
            gone = True
            return
        finally:
            with self.send_lock:
                self.sock = None
            sock.close()
            if gone and not self.leaving and self.on_gone is not None:
                self.on_gone()

    def act(self, command: str) -> None:
        if command == "stop" or command.startswith("stop "):
            grace = command[5:]     # the launcher's grace for this stop ('': --term-grace's)
            try:
                self.on_stop(*((float(grace),) if grace else ()))
            except ValueError:
                self.warn(f"rank {self.rank}: a stop command with no grace: {command!r}")
        elif command.startswith("sig ") and command[4:].isdigit():
            deliver(self.pid, int(command[4:]))
        elif command.startswith("stacks "):
            words = command.split(" ")
            if len(words) in (2, 3) and words[1].isalnum():
                threading.Thread(target=self._answer_stacks, args=(words[1], words[2:] == ["native"]),
                                 name="stacks", daemon=True).start()   # py-spy takes a while

    def _answer_stacks(self, ident: str, native: bool) -> None:
        try:
            if self.stacks is not None:
                text = self.stacks()
            else:
                from mpilaunch.rank import stacks

                text = stacks.dump_rank(self.pid, native)
        except Exception as exc:    # said in the answer: the launcher writes it to the file
            text = f"mpilaunch.rank: rank {self.rank}: no stacks: {exc}\n"
        data = text.encode("utf-8", "replace")
        nonce = self.nonce
        if nonce is None:       # not connected (any more): nobody to answer
            return
        head = f"stacks {ident} {len(data)} {mac(self.token, nonce, 0, f'stacks {ident} {len(data)}')}\n"
        self.send(head.encode() + data)


def listen(rank: int, channel: Channel,
           on_stop: Callable[..., None] = lambda grace=None: None) -> Link:
    """Take the launcher's commands for this adapter: ``sig N`` to its descendants, ``stop``
    -> ``on_stop()``. The launcher closing the connection while this rank runs (its attempt
    ended without it) ends the rank as a SIGTERM would. The link, for the monitor's samples."""
    def warn(text: str) -> None:
        status.write_stderr(f"mpilaunch.rank: rank {rank}: {text}\n")

    def gone() -> None:
        warn("the launcher ended this job's attempt while this rank still ran: ending it")
        os.kill(os.getpid(), signal.SIGTERM)

    link = Link(channel, rank, on_stop, warn, on_gone=gone)
    link.start()
    return link


def _disposition(pid: int, sig: int) -> str:
    """'caught', 'ignored' or 'default': ``sig``'s disposition in ``pid`` (/proc status masks)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            masks = dict(line.split(":", 1) for line in f if line.startswith(("SigCgt", "SigIgn")))
    except (OSError, ValueError):
        return "default"
    bit = 1 << (sig - 1)
    if int(masks.get("SigCgt", "0").strip(), 16) & bit:
        return "caught"
    return "ignored" if int(masks.get("SigIgn", "0").strip(), 16) & bit else "default"


def deliver(root: int, sig: int) -> None:
    """``sig`` to every descendant of ``root``, as a starter's forwarding would deliver it.
    SIGTSTP to a process that leaves it at its default action is SIGSTOP: the kernel discards a
    SIGTSTP that would stop a process of an orphaned process group, and MPICH's ranks each
    lead a session of their own (measured: the workers kept running)."""
    from mpilaunch.rank import descendants

    for pid in descendants.subtree(root):
        send = sig
        if sig == signal.SIGTSTP and _disposition(pid, sig) == "default":
            send = signal.SIGSTOP
        descendants.send([pid], send)
