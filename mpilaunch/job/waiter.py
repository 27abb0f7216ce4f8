"""A host other than worker-0: wait for worker-0's ``done`` (exit with its status), or give
up when worker-0 is gone.

The :class:`Waiter` listens on the abstract unix socket ``@mpilaunch-job-<key>-<index>`` (per
network namespace, so per host/container; no file to go stale; a peer must have our uid or be
root, checked with ``SO_PEERCRED``). Every :func:`liveness_every` seconds it connects to
worker-0's sshd port; once worker-0 has been in touch, ``--lost-after`` seconds without an
answer end the wait with :data:`LOST_STATUS`; so does no contact within ``contact_within``.
"""
from __future__ import annotations

import json
import os
import random
import select
import socket
import struct
import threading
import time
from typing import Callable, Dict, Optional, Tuple

from mpilaunch import net, ssh
from mpilaunch.errors import UsageError
from mpilaunch.job.spec import JobSpec, log

LIVENESS_EVERY = 5.0          # seconds between checks of worker-0's sshd port ...
LIVENESS_MAX_RATE = 20.0      # ... but all waiting hosts together at most this many connects a second
LOST_STATUS = 1


def liveness_every(n_hosts: int) -> float:
    """Seconds between a waiting host's probes of worker-0's sshd: LIVENESS_EVERY, stretched
    so that all waiting hosts together stay under LIVENESS_MAX_RATE connects a second (each
    probe makes worker-0's sshd fork a pre-auth child)."""
    return max(LIVENESS_EVERY, (n_hosts - 1) / LIVENESS_MAX_RATE)


def worker0_alive_probe(spec: JobSpec) -> Callable[[], bool]:
    """A function: does worker-0's sshd port accept a TCP connection (3 s bound)?"""
    cache: Dict[str, Tuple[str, int]] = {}

    def alive() -> bool:
        if "target" not in cache:
            target = ssh.ssh_target(spec.worker0, spec.port(0), spec.ssh_extra)
            addrs, _ = net.resolve(target.hostname, 5.0)
            if addrs is None:
                return False
            cache["target"] = (addrs[0], target.port)
        addr, port = cache["target"]
        return ssh.tcp_probe(addr, port, 3.0) is None

    return alive


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n") and len(data) < 65536:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _send(conn: socket.socket, reply: dict) -> None:
    conn.sendall(json.dumps(reply).encode() + b"\n")


class Waiter:
    """Serves the peer protocol on this host; ``alive()`` says whether worker-0 answers."""

    def __init__(self, spec: JobSpec, alive: Callable[[], bool], lost_after: float, contact_within: float,
                 liveness_every: float = LIVENESS_EVERY):
        self.spec = spec
        self.alive = alive
        self.lost_after = lost_after
        self.contact_within = contact_within
        self.liveness_every = liveness_every
        self.contacted = False
        self.seen_alive = False
        self.last_alive = time.monotonic()
        self._stop = threading.Event()
        self.sock: Optional[socket.socket] = None

    def bind(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind("\0" + self.spec.socket_name(self.spec.index))
        except OSError as exc:
            sock.close()
            raise UsageError(f"another `mpilaunch job` for these hosts already waits on this host "
                             f"(VC_TASK_INDEX={self.spec.index}): {exc.strerror}") from None
        sock.listen(128)
        self.sock = sock
        return sock

    def _liveness(self) -> None:
        # spread the first probes of many hosts started at once over one interval
        if self._stop.wait(random.uniform(0, self.liveness_every) if self.liveness_every > 1 else 0):
            return
        while not self._stop.is_set():
            try:
                ok = bool(self.alive())
            except Exception:  # noqa: BLE001
                ok = False
            if ok:
                self.last_alive = time.monotonic()
                self.seen_alive = True
            self._stop.wait(self.liveness_every)

    def _handle(self, conn: socket.socket) -> Optional[int]:
        """One peer message; -> the job's status for ``done``, else None."""
        conn.settimeout(5.0)
        try:
            _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                  struct.calcsize("3i")))
            if uid not in (os.getuid(), 0):
                return None
            try:
                msg = json.loads(_read_line(conn).decode("utf-8", "replace") or "{}")
            except ValueError:
                msg = {}
            if not isinstance(msg, dict) or msg.get("key") != self.spec.key:
                _send(conn, {"ok": False, "error": "wrong job key"})
                return None
            op = msg.get("op")
            if op == "hello":
                if not self.contacted:
                    log(f"job: worker-0 ({self.spec.worker0}) is in touch; waiting for the job to end")
                self.contacted = True
                self.last_alive = time.monotonic()
                _send(conn, {"ok": True, "index": self.spec.index, "pid": os.getpid(),
                             "hostname": socket.gethostname()})
                return None
            if op == "done":
                try:
                    status = int(msg["status"])
                except (KeyError, TypeError, ValueError):
                    status = 1
                status = status if 0 <= status <= 255 else 1
                _send(conn, {"ok": True, "index": self.spec.index})
                return status
            _send(conn, {"ok": False, "error": f"unknown op {op!r}"})
            return None
        except OSError:
            return None
        finally:
            conn.close()

    def _gave_up(self, started: float) -> bool:
        now = time.monotonic()
        if (self.contacted or self.seen_alive) and now - self.last_alive > self.lost_after:
            log(f"job: worker-0 ({self.spec.worker0}) has not answered for {now - self.last_alive:.0f}s "
                f"(--lost-after {self.lost_after:g}); giving up, status {LOST_STATUS}")
            return True
        if not self.contacted and now - started > self.contact_within:
            log(f"job: worker-0 ({self.spec.worker0}) did not get in touch within "
                f"{self.contact_within:g}s (is `mpilaunch job` running there with the same "
                f"VC_WORKER_HOSTS and SSHD_PORT?); giving up, status {LOST_STATUS}")
            return True
        return False

    def serve(self) -> int:
        sock = self.sock if self.sock is not None else self.bind()
        started = time.monotonic()
        watcher = threading.Thread(target=self._liveness, name="worker0-liveness", daemon=True)
        watcher.start()
        try:
            while True:
                ready, _, _ = select.select([sock], [], [], 1.0)
                if ready:
                    try:
                        conn, _ = sock.accept()
                    except OSError:
                        conn = None
                    if conn is not None:
                        status = self._handle(conn)
                        if status is not None:
                            log(f"job: worker-0 ({self.spec.worker0}) reports the job ended with status {status}")
                            return status
                if self._gave_up(started):
                    return LOST_STATUS
        finally:
            self._stop.set()
            sock.close()
