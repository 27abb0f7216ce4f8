"""In-place restarts, rank side (``--in-place PORT``, from ``--restart-mode in-place``).

After a worker or scheduler failure the starter (mpirun, its daemons) and every adapter stay;
each adapter stops its children and starts the next attempt's: a fresh rendezvous port,
``MPILAUNCH_RESTART_COUNT`` / ``TORCHELASTIC_RESTART_COUNT`` = the attempt, logs in
``LOG_DIR/attempt<k>/``. What is not a worker's failure (a lost host, a killed adapter or
daemon) still ends the starter, and the launcher relaunches it (mpilaunch/longrun/attempts.py).

**Coordination, without MPI** (rank/inplace/coordinate.py). Rank 0's adapter is the coordinator: it
listens on TCP ``PORT`` (the launcher's choice; rank 0's address is the one every rank already
has, the scheduler's) and every other adapter keeps one connection to it.

The first ``fail K`` of attempt K (a later one is a consequence: a peer's gloo broke) makes
the coordinator send ``restart K+1`` at once and, after ``ROOT_WINDOW`` s, write one status
line ``event: restart-in-place`` for the launcher with the earliest failure of those it got
(the launcher's summary and event record list the attempt like a relaunched one). A failure
in the last attempt of the budget, or an adapter that cannot reach the coordinator, is the
ordinary one: status lines, the adapter exits with the worker's status, the starter tears the
job down. An adapter whose worker exited 0 waits for ``finish`` (a rank may still fail and
restart everyone, its own rank included) before it exits.

**The spare worker** (rank/inplace/prestart.py, rank/inplace/spare.py). While attempt K runs, each adapter starts attempt K+1's worker
interpreter (rank/inplace/spare.py) with the heavy modules the script imports (``torch``,
``mindspore``... ``MPILAUNCH_SPARE_PRELOAD`` overrides the list, empty: no spare) already
imported, blocked on a socket; the restart hands it the attempt's environment and log and it
runs the script. A fresh interpreter importing torch is most of a restart's time otherwise.
It costs one idle interpreter per rank (~300 MB RSS with torch) and its import's CPU at the
attempt's start. Only a plain ``PYTHON SCRIPT`` worker gets one (not ``--no-python``,
``--module``, a NUMA wrapper).
"""
from __future__ import annotations

import os
import queue
import _signal as signal   # not signal: its enums cost every rank ~2 ms of CPU
import threading
import time

from mpilaunch.rank import status
from mpilaunch.rank.inplace.coordinate import Client, Coordinator
from mpilaunch.rank.inplace.prestart import Spare, preload_for, spare_eligible
from mpilaunch.rank.supervisor import RESTART, TEARDOWN_SIGNALS, Supervisor


# ------------------------------------------------------------------ the supervisor

class InPlaceSupervisor(Supervisor):
    """A supervisor of one attempt: its failure reports are held back (``quiet``) while the
    attempt may be restarted in place, and its worker may be a spare that is already up."""

    def __init__(self, *a, quiet: bool = False, spare: "Spare" = None, **kw):
        super().__init__(*a, **kw)
        self.quiet, self.spare, self.held = quiet, spare, []
        if spare is not None:
            if spare.proc is not None:
                self.keep.add(spare.proc.pid)
            else:               # not forked yet: too late to be of use
                spare.discard()
                self.spare = None

    def _report(self, child, cause: str, event: str = "exit") -> None:
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

    def failure_info(self):
        """The earliest own failure among the held reports, as the coordinator wants it."""
        from mpilaunch.rank import logs

        for child, cause, _event, t in self.held:
            if cause == "self" and child.status:
                spec = child.spec
                tail = ([] if child.start_error else logs.status_tail(spec.log_path, spec.env))
                return {"rank": self.rank, "host": self.host, "role": spec.role,
                        "code": child.status,
                        "signal": child.signal, "log": os.path.abspath(spec.log_path),
                        "tail": tail, "t": round(t, 3)}
        return None

    def _run_child(self, child) -> None:
        spare = self.spare
        if child.spec.role == "worker" and spare is not None and not spare.usable():
            self.spare = None
            spare.discard()
        elif child.spec.role == "worker" and spare is not None:
            self.spare = None
            try:
                if self._adopt(child, spare):
                    return
            except BaseException as exc:
                child.start_error = f"cannot start worker: {exc}"
                child.status = 127
                self.events.put(("exit", child.spec.role))
                raise
        super()._run_child(child)

    def _adopt(self, child, spare) -> bool:
        """The spare becomes this attempt's worker. False: it could not (start one anew)."""
        from mpilaunch.rank import firstout
        from mpilaunch.rank.relay import grow_pipe, relay

        spec = child.spec
        read_fd = write_fd = None
        if spec.tail_prefix is not None:
            read_fd, write_fd = os.pipe()
            grow_pipe(read_fd, self.pipe_size)
        with self.lock:
            if self.stopping:
                for fd in (read_fd, write_fd):
                    if fd is not None:
                        os.close(fd)
                spare.discard()
                return False
            child.proc = spare.proc
            ok = spare.go(spec, write_fd if write_fd is not None else child.log_fd)
        if write_fd is not None:
            os.close(write_fd)
        if not ok:
            child.proc = None
            if read_fd is not None:
                os.close(read_fd)
            spare.discard()
            return False
        self.keep.discard(spare.proc.pid)
        status.life(self.rank, self.host, spec.role, "started", pid=child.proc.pid)
        first = lambda: status.life(self.rank, self.host, "worker", "output")  # noqa: E731
        watch = firstout.watch(spec.log_path, first) if read_fd is None else None
        if read_fd is not None:
            child.relay = threading.Thread(
                target=relay, args=(read_fd, child.log_fd, spec.tail_prefix, self.stdout_fd, 0.1,
                                   self.pipe_size, first), name="relay-worker", daemon=True)
            child.relay.start()
        else:
            os.close(child.log_fd)
        spare.exited.wait()
        if watch is not None:
            watch.stop()
        rc = spare.returncode
        from mpilaunch.rank.supervisor import exit_status

        child.status = exit_status(rc)
        child.signal = -rc if rc < 0 else None
        self.events.put(("exit", spec.role))
        return True


# ------------------------------------------------------------------ the adapter's loop

def supervise(specs_for, specs, opts, rank: int, hostname: str, coord_addr: str, size: int,
              argv, local_size: int = 1, channel=None) -> int:
    """Attempts in place until one succeeds, the budget is spent, or the rank is stopped.
    ``specs_for(k, port)``: the children of attempt ``k`` rendezvousing at ``port``;
    ``specs``: attempt ``opts.longrun.restart_count``'s, already made."""
    from mpilaunch.rank import longrun
    from mpilaunch.rank.relay import PIPE_SIZE, PIPE_SIZE_MANY_RANKS
    from mpilaunch.rank.control import listen

    lr = opts.longrun
    k, last = lr.restart_count or 0, lr.max_restarts or 0
    between: "queue.SimpleQueue" = queue.SimpleQueue()
    box = {"sup": None}
    box_lock = threading.Lock()

    def deliver(ev) -> None:
        with box_lock:
            sup = box["sup"]
        (sup.events if sup is not None else between).put(ev)

    coord = None
    if rank == 0:
        try:
            coord = Coordinator(lr.in_place, k, last, size, hostname)
        except OSError as exc:
            status.write_stderr(f"mpilaunch.rank: in-place restarts off: port {lr.in_place} "
                                f"cannot be bound on rank 0's host ({exc.strerror}); a failure "
                                "ends the job (and a relaunch follows)\n")
    client = None
    if rank != 0 or coord is not None:
        client = Client(rank, deliver, coordinator=coord, addr=coord_addr, port=lr.in_place)
    asked = []

    def on_stop():      # the launcher's graceful stop: the same teardown as a SIGTERM
        if lr.term_grace is not None and not asked:
            asked.append(True)
            deliver(("signal", signal.SIGTERM))
    if channel is not None:
        listen(rank, channel, on_stop)
    pipe = PIPE_SIZE if local_size <= 8 else PIPE_SIZE_MANY_RANKS
    spare = None
    try:
        while True:
            worker = next((s for s in specs if s.role == "worker"), None)
            sup = InPlaceSupervisor(specs, rank, hostname, scheduler_grace=opts.scheduler_grace,
                                    pipe_size=pipe, tell_rank0=not opts.no_scheduler,
                                    quiet=client is not None and k < last, spare=spare)
            spare = None
            if lr.term_grace is not None:
                sup.signal_grace = lr.term_grace
            with box_lock:
                box["sup"] = sup
            _drain(between, sup.events, after=k)
            if client is not None and k < last and worker is not None:
                spare = _start_spare(sup, worker, argv, opts)
            here = opts._replace(log_dir=os.path.join(  # this attempt's heartbeat and stacks
                os.path.dirname(os.path.normpath(opts.log_dir)), f"attempt{k}"))
            dog = longrun.start_watchdog(sup, here, rank, hostname, lr.stall_timeout) \
                if lr.stall_timeout else None
            try:
                rc = sup.run()
            finally:
                if dog is not None:
                    dog.done.set()
                with box_lock:
                    box["sup"] = None
                if sup.jobdone is not None and sup.jobdone.sock is not None:
                    sup.jobdone.sock.close()
            _drain(sup.events, between)
            if sup.stop_signal is not None:
                sup.flush()
                return _graceful(lr, sup, asked, rank, hostname, rc)
            if rc == RESTART:
                pass
            elif rc == 0 and client is not None and k < last:
                if not client.done(k):
                    return 0
                got = _wait(between, client, k)
                if got[0] == "signal":
                    return 128 + got[1]
                if got[0] == "finish":
                    return 0
            elif rc != 0 and client is not None and k < last:
                info = sup.failure_info()
                if info is None or not client.fail(k, info):
                    sup.flush()
                    return rc
                got = _wait(between, client, k)
                if got[0] == "signal":
                    sup.flush()
                    return 128 + got[1]
            else:
                return rc
            k, port = client.latest
            specs = specs_for(k, port)
    finally:
        if spare is not None:
            spare.discard()
        if client is not None:
            client.close()
        if coord is not None:
            coord.close()


def _drain(src, dst, keep=("signal", "restart", "finish"), after=None) -> None:
    """Move the events that matter from ``src`` to ``dst``; ``after``: the attempt ``dst``
    runs (a restart to it, or to an earlier one, is done)."""
    while True:
        try:
            ev = src.get_nowait()
        except queue.Empty:
            return
        if ev[0] not in keep or (after is not None and ev[0] == "restart" and ev[1] <= after):
            continue
        dst.put(ev)


def _wait(between, client, k: int):
    """Between attempts: the next restart, the finish of attempt ``k``, or a stop signal."""
    old = {s: signal.signal(s, lambda n, f: between.put(("signal", n))) for s in TEARDOWN_SIGNALS}
    try:
        while True:
            if client.latest is not None and client.latest[0] > k:
                return ("restart", client.latest[0])
            if client.finished >= k:
                return ("finish", k)
            ev = between.get()
            if ev[0] == "signal":
                return ev
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _graceful(lr, sup, asked, rank: int, hostname: str, rc: int) -> int:
    from mpilaunch.rank import longrun

    if lr.term_grace is None:
        return rc
    got = 0 if asked and sup.stop_signal == signal.SIGTERM else sup.stop_signal
    status.emit(rank, hostname, "adapter", longrun.GRACE_EVENT, rc, got, "grace", None)
    return 0


def _start_spare(sup, worker, argv, opts):
    if not spare_eligible(worker, argv, opts):
        return None
    modules = preload_for(worker.argv, worker.env)
    if not modules:
        return None
    return Spare(sup, sup.children["worker"], modules)
