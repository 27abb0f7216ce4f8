"""One attempt's supervisor under in-place restarts (rank/inplace/loop.py runs one per
attempt): its failure reports are held back while the attempt may be restarted in place, and
its worker (and rank 0's MindSpore scheduler) may be the spare (rank/inplace/prestart.py)
already up, adopted instead of started.
"""
from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    import socket
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from mpilaunch.rank.plan import ChildSpec
    from mpilaunch.rank.supervisor import Running

from mpilaunch.rank import status
from mpilaunch.rank.inplace.learn import SPARE_LIFE
from mpilaunch.rank.inplace.prestart import Spare, run_argv
from mpilaunch.rank.supervisor import Supervisor, exit_status

# s a restart waits for a woken spare still importing (a fresh worker would import it all from
# the start); past this, something is wrong with the spare
SPARE_WAIT = 60.0
# in the workers' environment: each adapter says on stderr what became of its spare, and why
DEBUG_SPARE_VAR = "MPILAUNCH_DEBUG_SPARE"

class InPlaceSupervisor(Supervisor):
    """A supervisor of one attempt: its failure reports are held back (``quiet``) while the
    attempt may be restarted in place, and its worker (rank 0's scheduler too) may be a spare
    that is already up."""

    def __init__(self, children: Sequence[ChildSpec], rank: int, host: str, *, scheduler_grace: float,
                 pipe_size: int, tell_rank0: bool, quiet: bool = False, spare: Optional[Spare] = None,
                 learn: bool = False, sched_spare: Optional[Spare] = None) -> None:
        super().__init__(children, rank, host, scheduler_grace=scheduler_grace, pipe_size=pipe_size,
                         tell_rank0=tell_rank0)
        self.quiet: bool = quiet
        # by role: the worker's spare, and rank 0's scheduler's (a fresh scheduler imports
        # MindSpore while every worker's init() waits for it)
        self.spares: Dict[str, Spare] = {}
        worker = self.children.get("worker")
        # the worker's spec as planned (a fresh worker's argv goes through spare.py --run)
        self.worker_spec = worker.spec if worker is not None else None
        self.learn: bool = learn     # the worker says what it imported (rank/inplace/learn.py)
        self.channel: Any = None     # the adapter's end of that conversation, once started
        self.held: List[Tuple[Any, str, str, float]] = []   # (child, cause, event, when seen)
        for role, one in (("worker", spare), ("scheduler", sched_spare)):
            if one is None:
                continue
            if one.proc is not None and role in self.children:
                self.spares[role] = one
                self.keep.add(one.proc.pid)
            else:               # not forked yet: too late to be of use (or no such child)
                one.discard()

    def _report(self, child: Running, cause: str, event: str = "exit") -> None:
        if not self.quiet:
            return super()._report(child, cause, event)
        if child.reported:
            return
        child.reported = True
        self._finish_relay(child)
        self.held.append((child, cause, event, time.time()))   # when its failure was seen

    def flush(self) -> None:
        """The held reports, as status lines: the attempt was not restarted after all."""
        self.quiet = False
        for child, cause, event, _t in self.held:
            child.reported = False
            super()._report(child, cause, event)
        self.held = []

    def failure_info(self) -> Optional[Dict[str, object]]:
        """The earliest own failure among the held reports, as the coordinator wants it."""
        from mpilaunch.rank import logs

        for child, cause, _event, t in self.held:
            if cause == "self" and child.status:
                spec = child.spec
                tail = ([] if child.start_error else logs.status_tail(spec.log_path, spec.env))
                exc = None if child.start_error else logs.status_exception(
                    spec.log_path, spec.env, child.status, child.signal)
                return {"rank": self.rank, "host": self.host, "role": spec.role,
                        "code": child.status,
                        "signal": child.signal, "log": os.path.abspath(spec.log_path),
                        "tail": tail, "t": round(t, 3), "exception": exc}
        return None

    def _run_child(self, child: Running) -> None:
        role = child.spec.role
        spare = self.spares.pop(role, None)
        if spare is not None:
            how = spare.state(SPARE_WAIT, lambda: self.stopping)
            # where the restart's time went (the launcher's attempt lines: attempts/restart.py);
            # the launcher counts one new worker per rank, so the scheduler's is a debug line
            if role == "worker":
                status.life(self.rank, self.host, "worker", SPARE_LIFE[how])
            if child.spec.env.get(DEBUG_SPARE_VAR):   # tests and bench/: which way it went
                whose = "" if role == "worker" else f"{role} "
                status.write_stderr(f"mpilaunch.rank: rank {self.rank}: {whose}spare {how}\n")
                if spare.why:
                    status.write_stderr(f"mpilaunch.rank: rank {self.rank}: {whose}{spare.why}\n")
            if how not in ("ready", "waited for"):
                spare.discard(at_once=True)
                self._run_fresh(child)
                return
            try:
                if self._adopt(child, spare):
                    return
            except BaseException as exc:
                child.start_error = f"cannot start {role}: {exc}"
                child.status = 127
                self.events.put(("exit", role))
                raise
        self._run_fresh(child)

    def _run_fresh(self, child: Running) -> None:
        """A new child; a worker that says what it imports runs through spare.py ``--run``."""
        if not self.learn or child.spec.role != "worker":
            super()._run_child(child)
            return
        import socket

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        spec = child.spec
        bound = first_store(spec)
        fds = (theirs.fileno(),) + ((bound.fileno(),) if bound is not None else ())
        if bound is not None:
            from mpilaunch.rank.inplace.spare import STORE_FD_VAR

            spec = spec._replace(env=dict(spec.env, **{STORE_FD_VAR: str(bound.fileno())}))
        child.spec = spec._replace(argv=run_argv(spec.argv, theirs.fileno()),
                                   pass_fds=tuple(spec.pass_fds or ()) + fds)
        # the worker's process alone then holds its port, as if it had bound it
        child.handed = [theirs] + ([bound] if bound is not None else [])
        self.channel = ours
        try:
            super()._run_child(child)
        finally:
            ours.close()

    def _adopt(self, child: Running, spare: Spare) -> bool:
        """The spare becomes this attempt's worker (or scheduler: ``child``'s role, its spec and
        log as a fresh one's). False: it could not (start one anew)."""
        from mpilaunch.rank import firstout
        from mpilaunch.rank.relay import grow_pipe, relay_threads

        spec, proc, log_fd = child.spec, spare.proc, child.log_fd
        assert proc is not None and log_fd is not None   # a ready spare is forked; run() opened the log
        # as Supervisor._start_and_wait: a tailed worker writes to a pipe, and with torchrun's
        # --redirects 1 or 2 (spec.hidden) the stream kept off the console to a second one
        read_fd = write_fd = hid_r = hid_w = None
        if spec.tail_prefix is not None:
            read_fd, write_fd = os.pipe()
            grow_pipe(read_fd, self.pipe_size)
            if spec.hidden:
                hid_r, hid_w = os.pipe()
        out, err = (write_fd if write_fd is not None else log_fd), None
        if hid_w is not None and write_fd is not None:   # hid_w is made only with write_fd
            out, err = (hid_w, write_fd) if spec.hidden == 1 else (write_fd, hid_w)
        with self.lock:
            ok = not self.stopping
            if ok:
                child.proc = proc
                spare.wake()
                ok = spare.go(spec, out, err)
        for fd in (write_fd, hid_w):
            if fd is not None:
                os.close(fd)
        if not ok:
            child.proc = None
            for fd in (read_fd, hid_r):
                if fd is not None:
                    os.close(fd)
            spare.discard()
            return False
        self.keep.discard(proc.pid)
        worker = spec.role == "worker"
        if self.learn and worker:
            self.channel = spare.sock    # spare.py's worker answers on the same socket
        else:
            spare.sock.close()
        status.life(self.rank, self.host, spec.role, "started", pid=proc.pid)
        first = lambda: status.life(self.rank, self.host, "worker", "output")  # noqa: E731
        watch = firstout.watch(spec.log_path, first) if read_fd is None and worker else None
        if read_fd is not None and spec.tail_prefix is not None:   # as read_fd was made
            child.relay, child.hidden_relay = relay_threads(
                spec.role, spec.tail_prefix, read_fd, hid_r, log_fd, self.stdout_fd,
                self.pipe_size, first)
        else:
            os.close(log_fd)
        spare.exited.wait()
        spare.sock.close()
        if watch is not None:
            watch.stop()
        rc = spare.returncode
        assert rc is not None   # set before exited: it was forked
        child.status = exit_status(rc)
        child.signal = -rc if rc < 0 else None
        self.events.put(("exit", spec.role))
        return True


def first_store(spec: ChildSpec) -> Optional[socket.socket]:
    """Rank 0's fresh worker's own rendezvous port (``MASTER_PORT``), bound here before the
    worker starts, for it to serve (spare.py ``_serve_first``): the first attempt's, and a
    restart's without a spare. Only where a spare's early store would be (prestart.py
    ``listens``: env://, no server of the script's own), and not when the attempt's store is
    the holder's (every worker a client: hold.py). None: the worker binds it itself."""
    from mpilaunch.rank.inplace.hold import AGENT_STORE_VAR
    from mpilaunch.rank.inplace.prestart import listens, preload_for
    from mpilaunch.rank.inplace.storeport import store_port

    env = spec.env
    if env.get(AGENT_STORE_VAR) or not listens(spec.argv, env, preload_for(spec.argv, {})):
        return None
    try:
        return store_port(int(env.get("MASTER_PORT", "")))
    except ValueError:
        return None
