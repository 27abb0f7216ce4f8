"""The next attempt's worker, started before it is needed (in-place restarts, rank/inplace/loop.py).

Run by the worker's own interpreter as ``PYTHON spare.py MODULES FD``: it imports MODULES (a
comma list, e.g. ``torch``: the second or so a fresh interpreter spends before the script's
first line), then blocks on the UNIX socket FD. When the adapter restarts its worker in place
it sends one JSON message, ``{"env": {...}, "argv": [SCRIPT, ARGS...]}``, with the worker's
stdout/stderr as one SCM_RIGHTS file descriptor, or two (stdout's, then stderr's); this
process then becomes that worker: the environment replaced, fd 1 and 2 redirected,
``sys.argv`` and ``sys.path[0]`` as ``python SCRIPT ARGS...`` has them, and the script run
as ``__main__``. The socket closing
without a message (the adapter is gone, or the spare is not wanted) ends it with status 0.
Rank 0's spare may first get ``{"listen": PORT, ...}`` as soon as the restart is decided: it
then starts the attempt's rendezvous store on PORT (:func:`_listen`), between two imports if
it is still importing (a settled DDP job's spare may still be in its ~830 learnt modules).

**What the worker imported, imported again** (``{"import": [NAMES]}``, any number of times
before the restart). A script imports far more than its ``import`` lines say: a DDP model's
constructor alone imports ~830 modules (``torch._dynamo``, ``sympy``...: 1.1-1.3 s here, more
than ``import torch``), a spare that had imported ``torch`` only left all of that to the
restarted worker. So the worker itself says what it imported (:func:`_reporter`, below), and
the adapter passes those names on to this attempt's spare, which imports them, at SCHED_IDLE,
before it is wanted. Why that is sound:

* a fresh interpreter that imports names, not a fork of the worker: a fork would carry the
  worker's threads (gloo's, a DataLoader's) with whatever locks they held, its CUDA context
  (unusable in a forked child) and its sockets and files (the rendezvous port, a checkpoint
  being written). The spare holds none of that: it was never the worker;
* only modules the previous worker imported, and only library ones: a file under the
  interpreter's standard library or a site-packages directory (:func:`_library_dirs`). The
  user's own modules (the script's directory, ``PYTHONPATH``), ``__main__`` and modules made
  at run time (torch writes ``_remote_module_non_scriptable`` into a temporary directory) are
  never imported here: their import may do anything, and nothing of the user's runs in a spare
  but the imports its script's own lines name (``MODULES``);
* a library module's import defines things; the side effects some have (registering codecs,
  reading the environment) are those the next worker's own import would have, on the same
  environment (every variable but the attempt's port, count and log paths). None of the
  measured ones holds a device: torch initialises CUDA at its first use (``torch.cuda``'s
  lazy init), not at an import; should an import have done it anyway, the spare leaves (a
  process holding a device context must not wait beside the worker that needs the device),
  and the restart starts a fresh worker;
* an import that fails here is skipped: the worker imports it in its own order, as before.

**The worker's side** (:func:`_reporter`): every worker of an in-place job runs through this
file, the first one as ``PYTHON spare.py --run FD SCRIPT ARGS...`` (no spare before it: it
runs the script at once), the others as adopted spares; either keeps FD and a daemon thread
blocked on it. The adapter writes ``?`` on it while the worker runs (every second for its
first 10 s, then at 20, 40, 80, ... s: rank/inplace/learn.py); each time the thread answers
with one line, the library modules among ``sys.modules`` it has not sent yet, comma-separated.
The thread never runs otherwise: its cost is that walk over ``sys.modules``, measured in a
worker that built a DDP model (1957 modules): 2.5 ms the first time, 0.24 ms after, so ~5 ms
in its first 10 s (0.05 %), ~6 ms in its first minute (0.01 %), 0.24 ms per 300 s after.
Only an in-place job's worker that has a spare (an attempt left to restart into) runs so.

``PYTHON spare.py --hold FD`` is another use of this file: rank 0's store holder
(:func:`_hold`, rank/inplace/hold.py).

Stdlib only: this runs under whatever interpreter the worker uses, where mpilaunch may not be
installed. What differs from a fresh ``python SCRIPT``: the imports above were made with the
environment the worker had at the spare's start, so a script that sets, say,
``OMP_NUM_THREADS`` in ``os.environ`` before ``import torch`` gets torch's import-time reading
of the old value; and a traceback shows runpy's frames above the script's.
"""
import os
import sys

# Annotations are strings, their names the checker's only: this file's start-up imports are
# the worker's (typing's own TYPE_CHECKING would cost every spare an import).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any, Dict, Iterable, List, NoReturn, Optional, Sequence, Set, Tuple

    Msg = Dict[str, Any]   # one of the adapter's JSON lines, as json reads it


class _Lines:
    """The adapter's messages, one JSON line each; the descriptors that came with them."""

    def __init__(self, sock: "socket.socket") -> None:
        self.sock, self.buf, self.eof = sock, b"", False
        self.fds: "List[int]" = []

    def _read(self) -> None:
        import socket

        chunk, got, _flags, _addr = socket.recv_fds(self.sock, 1 << 20, 4)
        self.fds += got
        self.eof = self.eof or not chunk
        self.buf += chunk

    def next(self) -> "Optional[Msg]":
        import json

        while b"\n" not in self.buf:
            if self.eof:
                return None
            self._read()
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def port_of(self, msg: "Msg") -> "Optional[int]":
        """A ``listen`` line's bound port (``"fd"``): the first held, sent before ``go``'s."""
        return self.fds.pop(0) if msg.get("fd") and self.fds else None

    def listen_now(self) -> None:
        """A ``listen`` line already sent, taken out of turn (no wait: between two imports of a
        long list, so that rank 0's store is up as soon as the restart is decided, not after
        the list; the other lines keep their order)."""
        import json
        import select   # not recv_fds' flags: Python 3.11's ignores them (a blocking read)

        try:
            if not self.eof and select.select([self.sock], [], [], 0)[0]:
                self._read()
        except (OSError, ValueError):    # gone: the blocking read says so
            pass
        if b'"listen"' not in self.buf:
            return
        lines = self.buf.split(b"\n")
        for i, line in enumerate(lines[:-1]):
            if b'"listen"' in line:
                msg = json.loads(line)
                if "listen" in msg:
                    self.buf = b"\n".join(lines[:i] + lines[i + 1:])
                    _normal_priority()
                    _listen(msg, self.port_of(msg))
                    return


_STORE: list = []     # the rendezvous store this process listens on before its script runs


def _listen(msg: "Msg", fd: "Optional[int]") -> None:
    """``{"listen": PORT, "world": N, "libuv": bool, "fd": bool}``: rank 0's worker is wanted
    on PORT: its TCPStore server listens now, before the script gets to
    ``init_process_group``, whose env:// store (multi-tenant, the same port) is then this one;
    the other ranks' first connection finds it up instead of retrying (TCPStore's client backs
    off ~0.3 s after a refusal). ``fd``: the port, bound by the adapter when the restart was
    decided (or before this worker started: :func:`_serve_first`), so a client that came
    while this process was still importing torch waits in its backlog."""
    try:
        from torch.distributed import TCPStore

        if fd is not None:
            os.set_inheritable(fd, False)   # the store's, not the script's children's
        _STORE.append(TCPStore("127.0.0.1", int(msg["listen"]), int(msg["world"]), True,
                               wait_for_workers=False, multi_tenant=True,
                               use_libuv=bool(msg.get("libuv", True)),
                               **({} if fd is None else {"master_listen_fd": fd})))
    except Exception:   # the script's own init binds it, as without this
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


# rank 0's adapter bound this worker's own rendezvous port before starting it (adopt.py
# ``first_store``): the descriptor's number, in the environment of ``--run`` only
STORE_FD_VAR = "MPILAUNCH_STORE_FD"


def _serve_first() -> None:
    """A ``--run`` worker given its port (:data:`STORE_FD_VAR`, taken out of the environment:
    the script never sees it) serves its store on it before the script runs, as an adopted
    spare does at a restart: the other ranks' workers, which may reach ``init_process_group``
    before this one has imported torch, wait in the port's backlog instead of being refused
    and backing off. Its ``import torch.distributed`` is one the script makes anyway."""
    fd = os.environ.pop(STORE_FD_VAR, None)
    if fd is None:
        return
    env = os.environ
    try:
        _listen({"listen": int(env.get("MASTER_PORT", "")), "world": int(env.get("WORLD_SIZE", "1")),
                 "libuv": env.get("USE_LIBUV", "1") != "0"}, int(fd))
    except ValueError:
        pass


def _normal_priority() -> None:
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


def _device_held() -> bool:
    """An import initialised CUDA (torch's): this process now holds a device context."""
    torch = sys.modules.get("torch")
    try:
        return torch is not None and bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _import(names: "Iterable[str]", lines: "Optional[_Lines]" = None) -> None:
    """Import ``names`` in their order (a package before its modules, as the worker did);
    one that fails is the worker's to meet. Ends this process once a device is held. Between
    two imports, a ``listen`` the adapter sent meanwhile is done at once (``lines``)."""
    for name in names:
        if name in sys.modules:
            continue
        try:
            __import__(name)
        except BaseException:   # SystemExit too: a module's import is not this process's exit
            pass
        if _device_held():
            os._exit(0)
        if lines is not None and not _STORE:
            lines.listen_now()


def _library_dirs() -> "Tuple[str, ...]":
    """Where library modules live: the standard library (its lib-dynload and, outside a
    virtual environment, site-packages are under it) and the site-packages directories, each
    as given and resolved, with a final separator, for a prefix test."""
    import site

    dirs = {os.path.dirname(os.__file__)}
    try:
        dirs.update(site.getsitepackages())
        dirs.add(site.getusersitepackages())
    except (AttributeError, OSError):
        pass
    both = dirs | {os.path.realpath(d) for d in dirs if d}
    return tuple(os.path.join(d, "") for d in both if d)


def _modules(sent: "Set[str]", dirs: "Tuple[str, ...]", script_dir: str) -> "List[str]":
    """The library modules in ``sys.modules`` not in ``sent`` (added to it), in import order."""
    new = []
    for name, mod in list(sys.modules.items()):
        if name in sent:
            continue
        sent.add(name)
        try:    # the module's own dict: a lazy module's getattr would import it, here
            path = object.__getattribute__(mod, "__dict__").get("__file__")
        except (AttributeError, TypeError):
            continue
        if (isinstance(path, str) and path.startswith(dirs) and not path.startswith(script_dir)
                and name not in ("__main__", "__mp_main__")):
            new.append(name)
    return new


def _reporter(fd: int, script_dir: str) -> None:
    """The worker's end of the adapter's question ``?``: one line of the library modules it
    imported since the last answer (names carry no comma or newline)."""
    import _socket

    try:
        sock = _socket.socket(fileno=fd)
    except OSError:
        return
    sent: set = set()
    dirs = None
    try:
        while True:
            asked = sock.recv(64)
            if not asked:
                return
            if dirs is None:
                dirs = _library_dirs()
            # the adapter's end may have closed meanwhile (it stops asking at a restart)
            sock.sendall((",".join(_modules(sent, dirs, script_dir)) + "\n").encode())
    except OSError:
        return
    finally:
        sock.close()


def _run(argv: "Sequence[str]", report_fd: int) -> None:
    """Run ``argv`` (``SCRIPT ARGS...``) as ``python SCRIPT ARGS...`` would, the reporter on
    ``report_fd`` (-1: none)."""
    sys.argv = list(argv)
    script_dir = os.path.dirname(os.path.realpath(argv[0]))
    sys.path.insert(0, script_dir)
    if report_fd >= 0:
        import _thread

        try:    # the script's own children (subprocess, exec) do not get the adapter's socket
            os.set_inheritable(report_fd, False)
        except OSError:
            return runpy_run(argv[0])

        _thread.start_new_thread(_reporter, (report_fd, os.path.join(script_dir, "")))
    runpy_run(argv[0])


def runpy_run(script: str) -> None:
    import runpy

    runpy.run_path(script, run_name="__main__")


HOLDER_NAME = "mpilaunch-store"    # the holder's process name once it is ready (15 bytes max)


def _hold(fd: int) -> "NoReturn":
    """``--hold FD``: rank 0's store holder (rank/inplace/hold.py says why and when). Imports
    ``torch.distributed``, says ``+``, then for each ``{"hold": PORT, "world": N, "libuv": b}``
    starts a TCPStore server on PORT and answers ``held PORT`` (``failed PORT`` if it cannot).
    It keeps the last two attempts' stores (the newest one's workers are its clients; an older
    attempt's workers are gone) and leaves at EOF, its stores with it."""
    import json
    import socket

    sock = socket.socket(fileno=fd)
    try:
        from torch.distributed import TCPStore
    except BaseException:
        os._exit(0)     # EOF to the adapter: no holder, the restarts go as without one
    if _device_held():
        os._exit(0)
    _normal_priority()   # blocked from now on: no CPU taken, but served at once when asked
    try:    # what ps and top show from now on: it is up (tests wait for that name)
        with open("/proc/self/comm", "w") as fh:
            fh.write(HOLDER_NAME)
    except OSError:
        pass
    stores: list = []
    try:
        sock.sendall(b"+")
        for line in sock.makefile("rb"):
            msg = json.loads(line)
            port = int(msg["hold"])
            try:
                store = TCPStore("127.0.0.1", port, int(msg["world"]), True,
                                 wait_for_workers=False,
                                 use_libuv=bool(msg.get("libuv", True)))
            except Exception:
                sock.sendall(b"failed %d\n" % port)
                continue
            stores = stores[-1:] + [store]
            sock.sendall(b"held %d\n" % port)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    os._exit(0)


def main() -> None:
    del sys.path[0]    # this file's directory: its modules are not the script's
    if sys.argv[1] == "--run":     # a worker with no spare before it
        _serve_first()
        _run(sys.argv[3:], int(sys.argv[2]))
        return
    if sys.argv[1] == "--hold":    # rank 0's store holder, for the job's life
        _hold(int(sys.argv[2]))
        return
    modules, fd = sys.argv[1], int(sys.argv[2])
    import socket

    sock = socket.socket(fileno=fd)
    lines = _Lines(sock)
    # not out of turn before the ready byte: a spare that is not ready yet may be discarded for a
    # fresh worker (its wait ran out), and its store then goes with it under the clients' feet
    _import(filter(None, modules.split(",")))
    try:
        sock.send(b"+")     # ready: the adapter adopts only a spare that is (prestart.py)
    except OSError:
        pass
    msg = lines.next()
    while msg is not None and ("listen" in msg or "import" in msg):
        if "import" in msg:
            _import(msg["import"], lines)
            try:
                sock.send(b"+")     # and these too (the adapter counts: prestart.py caught_up)
            except OSError:
                pass
        else:
            _normal_priority()
            _listen(msg, lines.port_of(msg))
        msg = lines.next()
    if msg is None:
        os._exit(0)
    _normal_priority()
    # stdout and stderr: one descriptor for both, or two (torchrun's --redirects 1 or 2 keeps
    # one stream off the console: the adapter relays each pipe its own way)
    out, err = lines.fds[0], lines.fds[-1]
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in set(lines.fds):
        os.close(fd)
    os.environ.clear()
    os.environ.update(msg["env"])
    fd = os.dup(sock.fileno())    # the worker's reporter keeps the adapter's socket
    sock.close()
    _run(msg["argv"], fd)


if __name__ == "__main__":
    main()
