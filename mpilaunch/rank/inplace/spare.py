"""The next attempt's worker, started before it is needed (in-place restarts, rank/inplace/loop.py).

Run by the worker's own interpreter as ``PYTHON spare.py MODULES FD``: it imports MODULES (a
comma list, e.g. ``torch``: the second or so a fresh interpreter spends before the script's
first line), then blocks on the UNIX socket FD. When the adapter restarts its worker in place
it sends one JSON message, ``{"env": {...}, "argv": [SCRIPT, ARGS...]}``, with the worker's
stdout/stderr as an SCM_RIGHTS file descriptor; this process then becomes that worker: the
environment replaced, fd 1 and 2 redirected, ``sys.argv`` and ``sys.path[0]`` as
``python SCRIPT ARGS...`` has them, and the script run as ``__main__``. The socket closing
without a message (the adapter is gone, or the spare is not wanted) ends it with status 0.
Rank 0's spare may first get ``{"listen": PORT, ...}`` as soon as the restart is decided: it
then starts the attempt's rendezvous store on PORT (:func:`_listen`).

What differs from a fresh ``python SCRIPT``: MODULES were imported with the environment the
worker had at the spare's start (every variable but the attempt's port, restart count and log
paths is the same), so a script that sets, say, ``OMP_NUM_THREADS`` in ``os.environ`` before
``import torch`` gets torch's import-time reading of the old value. Stdlib only: this runs
under whatever interpreter the worker uses, where mpilaunch may not be installed.
"""
import json
import os
import socket
import sys


class _Lines:
    """The adapter's messages, one JSON line each; the descriptors that came with them."""

    def __init__(self, sock):
        self.sock, self.buf, self.fds = sock, b"", []

    def next(self):
        while b"\n" not in self.buf:
            chunk, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 4)
            self.fds += got
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


_STORE: list = []     # the rendezvous store this process listens on before its script runs


def _listen(msg):
    """``{"listen": PORT, "world": N, "libuv": bool}``: rank 0's worker is wanted on PORT: its
    TCPStore server listens now, before the script gets to ``init_process_group``, whose env://
    store (multi-tenant, the same port) is then this one; the other ranks' first connection
    finds it up instead of retrying (TCPStore's client backs off ~0.3 s after a refusal)."""
    try:
        from torch.distributed import TCPStore

        _STORE.append(TCPStore("127.0.0.1", int(msg["listen"]), int(msg["world"]), True,
                               wait_for_workers=False, multi_tenant=True,
                               use_libuv=bool(msg.get("libuv", True))))
    except Exception:   # the script's own init binds it, as without this
        pass


def _normal_priority():
    """Leave SCHED_IDLE (the adapter started this process there while it waited, where it may
    leave it: rank/inplace/prestart.py), every thread of it."""
    try:
        if os.sched_getscheduler(0) != os.SCHED_IDLE:
            return
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_OTHER, os.sched_param(0))
            except OSError:
                pass
    except (OSError, AttributeError):
        pass


def main():
    modules, fd = sys.argv[1], int(sys.argv[2])
    del sys.path[0]    # this file's directory: its modules are not the script's
    sock = socket.socket(fileno=fd)
    for name in filter(None, modules.split(",")):
        try:
            __import__(name)
        except Exception:   # the script will meet the same error, in its own log
            pass
    try:
        sock.send(b"+")     # ready: the adapter adopts only a spare that is (prestart.py)
    except OSError:
        pass
    lines = _Lines(sock)
    msg = lines.next()
    while msg is not None and "listen" in msg:
        _normal_priority()
        _listen(msg)
        msg = lines.next()
    sock.close()
    if msg is None:
        os._exit(0)
    _normal_priority()
    out = lines.fds[0]
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    os.environ.clear()
    os.environ.update(msg["env"])
    argv = msg["argv"]
    sys.argv = list(argv)
    sys.path.insert(0, os.path.dirname(os.path.realpath(argv[0])))
    import runpy

    runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
