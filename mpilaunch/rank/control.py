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
NONCE``; the launcher answers ``ok MAC`` (proof that it holds the key, so a stranger
listening at one of the addresses is skipped). Each command after that is ``SEQ CMD MAC``
with MAC = HMAC-SHA256(key, "NONCE SEQ CMD") and SEQ increasing: a command cannot be forged,
replayed or moved to another connection. Commands: ``stop`` (the graceful stop) and ``sig
N`` (signal N to every descendant of this adapter: the workers, the scheduler and what they
started; the adapter itself is not signalled, so it can still take the next command).

Everything runs in one daemon thread started with the teardown signals blocked (the main
thread must get them); socket, hmac and hashlib are imported there, only when the launch has
a channel (the launcher opens one for --term-grace and for a starter that does not forward a
signal: docs/ARCHITECTURE.md, "Signals").
"""
from __future__ import annotations

import os
import _signal as signal   # not signal: its enums cost every rank ~2 ms of CPU
import threading

ENDPOINT_VAR = "MPILAUNCH_CONTROL"
TOKEN_VAR = "MPILAUNCH_CONTROL_TOKEN"
CONNECT_TIMEOUT = 3.0       # per address; a blackholed address costs this much, once
MAX_LINE = 512
# what the supervisor's main thread waits for (rank/supervisor.py): never taken here
_MAIN_THREADS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD)


def mac(token: str, nonce: str, seq: int, command: str) -> str:
    import hashlib
    import hmac

    return hmac.new(token.encode(), f"{nonce} {seq} {command}".encode(),
                    hashlib.sha256).hexdigest()


def parse_endpoint(text: str):
    """``a,b:port`` -> (["a", "b"], port); ValueError when malformed."""
    addrs, sep, port = text.rpartition(":")
    if not sep or not addrs:
        raise ValueError(text)
    return [a for a in addrs.split(",") if a], int(port)


def take(env: dict):
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


def _readline(sock, buf: bytearray):
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


class Link(threading.Thread):
    """The adapter's end of the channel. ``on_stop()``: the launcher asked for the graceful
    stop; every ``sig N`` is delivered to this adapter's descendants here."""

    def __init__(self, channel, rank, on_stop, warn):
        super().__init__(name="control", daemon=True)
        self.endpoint, self.token = channel
        self.rank, self.on_stop, self.warn = rank, on_stop, warn
        self.pid = os.getpid()      # whose descendants get the signals
        self.connected = threading.Event()

    def start(self) -> None:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _MAIN_THREADS)
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _connect(self):
        import socket

        try:
            addrs, port = parse_endpoint(self.endpoint)
        except ValueError:
            self.warn(f"{ENDPOINT_VAR}={self.endpoint!r} is not ADDR[,ADDR...]:PORT")
            return None
        nonce = os.urandom(16).hex()
        for addr in addrs:
            try:
                sock = socket.create_connection((addr, port), timeout=CONNECT_TIMEOUT)
            except OSError:
                continue
            try:
                sock.sendall(f"hello {self.rank} {nonce}\n".encode())
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

    def run(self) -> None:
        got = self._connect()
        if got is None:
            return
        sock, nonce, buf = got
        self.connected.set()
        last = 0
        try:
            while True:
                line = _readline(sock, buf)
                if line is None:
                    return          # the launcher is gone (its end of the attempt)
                seq, _, rest = line.partition(" ")
                command, _, tag = rest.rpartition(" ")
                if not seq.isdigit() or int(seq) <= last or tag != mac(self.token, nonce, int(seq), command):
                    continue        # forged, replayed or garbled: ignored
                last = int(seq)
                self.act(command)
        except OSError:
            return
        finally:
            sock.close()

    def act(self, command: str) -> None:
        if command == "stop":
            self.on_stop()
        elif command.startswith("sig ") and command[4:].isdigit():
            deliver(self.pid, int(command[4:]))


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
