"""The running launcher's end of ``mpilaunch stacks``: a Unix socket in its private run dir
(0700, the socket 0600: only its owner can ask), named in the log dir by a pointer file
(``LOG_DIR/.mpilaunch-stacks``, 0600: a log dir is what a user knows of a running job).

A request (one line, ``stacks`` or ``stacks native``) is answered by asking every adapter
over the control channel the launcher already holds (``supervise/control.py``: no new ssh login,
the same across hosts); each answers with its py-spy dumps (``rank/stacks.py``). The texts go
to ``LOG_DIR/stacks/TIME/rank_R.txt`` with the verdict (``verdict.py``) in ``verdict.txt``;
the answer is one JSON line. The job is not touched: py-spy reads each process for a moment.

``top`` (``mpilaunch top``: stacks/topcommand.py) is answered at once with the monitor's view of
the job (monitor/board.py's ``view()``, a ``JobView`` as JSON): what the adapters last sent,
nothing asked of the ranks.
"""
from __future__ import annotations

# _socket, as the control channel (supervise/control.py): socket.py's import (its enums, array)
# costs the launcher's CPU in every launch while the ranks start (docs/ARCHITECTURE.md, start-up)
import _socket
import os
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence

from mpilaunch import net, rundir
from mpilaunch.output import events
from mpilaunch.output.jsonline import dumps

if TYPE_CHECKING:       # annotations only: nothing more is imported at run time
    from typing import Protocol, Tuple, TypedDict

    from mpilaunch.backends.base import Plan
    from mpilaunch.monitor.board import Board

    # supervise/ (a layer above) holds these: the shapes this module reads of them
    class Control(Protocol):   # supervise/control.py's Control
        def stacks(self, timeout: float, native: bool = False
                   ) -> Tuple[Dict[int, str], List[int]]: ...

        def host_of(self, rank: int) -> str: ...

    class RunningJob(Protocol):   # supervise/starter.py's Job
        @property
        def control(self) -> Optional[Control]: ...
        @property
        def np(self) -> int: ...

    class Answer(TypedDict):   # what `mpilaunch stacks` is told (docs/HANGS.md)
        dir: str; verdict: str; odd: List[int]; ranks: int; read: int   # noqa: E702
        np: int; missing: List[int]; unreached: List[int]; seconds: float   # noqa: E702
        hosts: Dict[str, str]

POINTER = ".mpilaunch-stacks"     # the socket's path, the launcher's pid and its host, a line each
SOCKET = "stacks.sock"
EXEC = "exec"       # the pointer of a job whose ranks run --exec: no adapter to ask
ASK_TIMEOUT = 60.0


def write_pointer(log_dir: str, text: str) -> Optional[str]:
    path = os.path.join(log_dir, POINTER)
    try:
        os.makedirs(log_dir, exist_ok=True)
        rundir.write_atomic(path, text)   # 0600, never seen half-written by `mpilaunch stacks`
        return path
    except OSError:
        return None


def remove_pointer(path: str, text: str) -> None:
    """Only our own (a later job in the same log dir wrote its own)."""
    try:
        with open(path) as f:
            if f.read() != text:
                return
        os.unlink(path)
    except OSError:
        pass


def stamp() -> str:
    t = time.time()
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(t)) + f".{int(t * 1000) % 1000:03d}"


def gather(control: Control, np: int, log_dir: str, native: bool = False,
           timeout: float = ASK_TIMEOUT) -> Answer:
    """Ask every adapter, write the files, judge: the answer's fields."""
    from mpilaunch.stacks import verdict   # its patterns only when asked (docs/ARCHITECTURE.md, start-up)

    t0 = time.monotonic()
    answers, asked = control.stacks(timeout, native)
    hosts = {r: control.host_of(r) for r in range(np)}
    missing = sorted(set(asked) - set(answers))
    unreached = sorted(set(range(np)) - set(asked))
    line, odd = verdict.verdict(answers, hosts, missing + unreached)
    out_dir = os.path.join(log_dir, "stacks", stamp())
    os.makedirs(out_dir, exist_ok=True)
    for r, text in answers.items():
        with open(os.path.join(out_dir, f"rank_{r}.txt"), "w") as f:
            f.write(f"# rank {r} on host {hosts.get(r, '?')}\n{text}")
    with open(os.path.join(out_dir, "verdict.txt"), "w") as f:
        f.write(line + "\n")
    read = sum(1 for t in answers.values() if verdict.parse(t).get("worker"))
    return {"dir": out_dir, "verdict": line, "odd": odd, "ranks": len(answers), "read": read,
            "np": np, "missing": missing, "unreached": unreached,
            "seconds": round(time.monotonic() - t0, 3),
            "hosts": {str(r): hosts[r] for r in odd}}


class Server:
    """Listens while one attempt runs; ``close()`` removes the socket and the pointers."""

    def __init__(self, run_dir: str, log_dirs: Sequence[str], control: Control, np: int,
                 board: Optional[Board] = None) -> None:
        self.control, self.np = control, np
        self.board = board      # monitor/board.py's: what `mpilaunch top` shows (None: monitor off)
        self.log_dir = log_dirs[0]
        self.path = os.path.join(run_dir, SOCKET)
        self.sock = net.listener(_socket.AF_UNIX)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.sock.listen(8)
        self.text = f"{self.path}\n{os.getpid()}\n{os.uname().nodename}\n"
        self.pointers = [p for p in (write_pointer(d, self.text) for d in log_dirs) if p]
        self.closed = False
        self.thread = threading.Thread(target=self._serve, name="stacks-server", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: _socket.socket) -> None:
        try:
            conn.settimeout(5)
            req = conn.recv(256).decode("ascii", "replace").split()
            conn.settimeout(None)
            if req[:1] == ["top"]:
                conn.sendall((self._view() + "\n").encode())
                return
            if not req or req[0] != "stacks":
                return
            timeout = float(req[2]) if len(req) > 2 else ASK_TIMEOUT
            reply: object
            try:
                answer = gather(self.control, self.np, self.log_dir, req[1:2] == ["native"], timeout)

                events.emit(events.Kind.STACKS, dir=answer["dir"], verdict=answer["verdict"],
                            odd=answer["odd"], seconds=answer["seconds"])
                reply = answer
            except OSError as exc:
                reply = {"error": f"cannot write the stacks into {self.log_dir}: {exc.strerror}"}
            conn.sendall((dumps(reply) + "\n").encode())
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def _view(self) -> str:
        board = self.board
        if board is None:
            return dumps({"error": "this job keeps no view of its ranks: its monitor is off "
                                  "(--sample-interval 0)"})
        return board.view().to_json()

    def close(self) -> None:
        self.closed = True
        for p in self.pointers:
            remove_pointer(p, self.text)
        try:
            self.sock.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


def open_for(run_dir: str, plan: Plan, control: Optional[Control],
             board: Optional[Board] = None) -> "Server | List[str] | None":
    """The server of an attempt with a control channel; for one without (``--exec``), the
    pointers that say so; None when the plan names no log dir (``plan.log_dirs``: the ranks'
    log dir, then the job's own when that is an attempt's)."""
    dirs = list(plan.log_dirs)
    if not dirs:
        return None
    if control is None:
        text = f"{EXEC}\n{os.getpid()}\n{os.uname().nodename}\n"
        return [p for p in (write_pointer(d, text) for d in dirs) if p]
    try:
        return Server(run_dir, dirs, control, plan.np, board)
    except OSError:
        return None


def close(opened: "Server | List[str] | None") -> None:
    if isinstance(opened, Server):
        opened.close()
    elif opened:
        for p in opened:
            try:
                os.unlink(p)
            except OSError:
                pass


STALL_TIMEOUT = 20.0    # s for every silent rank's answer before a stalled job is ended


def stall_verdict(job: RunningJob, log_dir: str) -> Optional[str]:
    """For ``--stall-timeout`` (attempts/restart.py), before it ends a stalled job: every rank's
    stacks into ``log_dir``/stacks/TIME as ``mpilaunch stacks`` writes them, and the verdict
    line (recorded as a ``stacks`` event); None without a control channel or on an error."""
    control = job.control
    if control is None or not log_dir:
        return None

    try:
        answer = gather(control, job.np, log_dir, timeout=STALL_TIMEOUT)
    except OSError:
        return None
    events.emit(events.Kind.STACKS, dir=answer["dir"], verdict=answer["verdict"], odd=answer["odd"],
                seconds=answer["seconds"], reason="stall")
    return answer["verdict"]
