"""In-place restarts, rank side (``--in-place PORT``, from ``--restart-mode in-place``).

After a worker or scheduler failure mpirun, its daemons and every adapter stay; each adapter
stops its children and starts the next attempt's (a fresh rendezvous port, the restart count,
logs in ``LOG_DIR/attempt<k>/``). What is not a worker's failure (a lost host, a killed
adapter or daemon) still ends the starter: the launcher relaunches it (attempts/loop.py).

**Coordination, without MPI** (rank/inplace/coordinate.py says how): rank 0's adapter listens
on TCP ``PORT``; the first failure of an attempt restarts every rank at once. A failure in the
budget's last attempt, or an adapter that cannot reach the coordinator, is the ordinary one:
the adapter exits with the worker's status, the starter tears the job down. An adapter whose
worker exited 0 waits for ``finish`` (a rank may still fail and restart everyone).

**The spare worker** (rank/inplace/prestart.py, spare.py). While attempt K runs, each adapter
starts attempt K+1's worker interpreter with the heavy modules the script imports (``torch``...;
``MPILAUNCH_SPARE_PRELOAD`` overrides the list, empty: no spare) and what the running worker
says it imported (rank/inplace/learn.py), blocked on a socket; the restart hands it the
attempt's environment and output, and it runs the script (a fresh interpreter's imports are
most of a restart's time). It costs one idle interpreter per rank (~300 MB RSS with torch) and
its imports' CPU. Only a plain ``PYTHON SCRIPT`` worker gets one (not ``--no-python``,
``--module``, a NUMA wrapper). Rank 0's MindSpore scheduler gets one too, started and adopted
the same way with the scheduler's own spec: a fresh scheduler imports MindSpore while every
worker's ``init()`` waits for it. It gets the preload list only, not the worker's learnt
imports: the scheduler runs the script up to ``init()`` and no further, and what the worker
imports after (its model, the graph compiler) would keep the scheduler's spare busy at the
restart, where the workers wait on it. Rank 0's store holder: rank/inplace/hold.py.
"""
from __future__ import annotations

import os
import _signal as signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, List, Optional, Sequence, Tuple

    from mpilaunch.rank.options import Options
    from mpilaunch.rank.plan import ChildSpec
    from mpilaunch.rank.runner import Inbox

from mpilaunch.contract import attempt_log_dir
from mpilaunch.rank import status
from mpilaunch.rank.inplace.adopt import DEBUG_SPARE_VAR, InPlaceSupervisor
from mpilaunch.rank.inplace.coordinate import Client, Coordinator
from mpilaunch.rank.inplace.hold import Holder, agent_store, attach, start_holder
from mpilaunch.rank.inplace.learn import LEARN_VAR, Known, Learner
from mpilaunch.rank.inplace.prestart import Spare, spare_modules, start_spare
from mpilaunch.rank.supervisor import RESTART, TEARDOWN_SIGNALS

# ------------------------------------------------------------------ the hooks of runner.supervise

class Restarts:
    """In-place restarts as the hooks of :func:`mpilaunch.rank.runner.supervise`: one
    supervisor per attempt until one succeeds, the budget is spent, or the rank is stopped.
    ``specs_for(k, port)``: the children of attempt ``k`` rendezvousing at ``port``."""

    def __init__(self, inbox: Inbox, opts: Options, rank: int, hostname: str, coord_addr: str, size: int,
                 argv: Sequence[str], specs_for: Callable[[int, int], List[ChildSpec]]) -> None:
        lr = opts.resilience
        assert lr is not None   # --in-place is one of the long-job flags
        self.inbox, self.opts, self.argv, self.specs_for = inbox, opts, argv, specs_for
        self.k, self.last = lr.restart_count or 0, lr.max_restarts or 0
        self.told = self.k       # the newest attempt this rank was told of or went on to, and
        self.deliver_lock = threading.Lock()    # its lock against the coordinator's word
        self.rank, self.host = rank, hostname
        self.status = 0          # the rank's, once next() said there is no next attempt
        self.spare: Optional[Spare] = None   # the next attempt's worker, already started (prestart.py)
        self.sched_spare: Optional[Spare] = None    # and its scheduler (rank 0, MindSpore)
        self.known = Known()                 # what this rank's workers imported (learn.py)
        self.learner: Optional[Learner] = None
        self.watch: Any = None               # the worker's first output (firstout.Watch), when wanted
        self.first_output: Optional[float] = None
        self.coord: Optional[Coordinator] = None
        self.holder: Optional[Holder] = None    # rank 0's store holder (hold.py), once started
        if rank == 0:
            try:
                self.coord = Coordinator(lr.in_place, self.k, self.last, size, hostname,
                                         lr.no_progress)
            except OSError as exc:
                status.write_stderr(f"mpilaunch.rank: in-place restarts off: port {lr.in_place} "
                                    f"cannot be bound on rank 0's host ({exc.strerror}); a "
                                    "failure ends the job (and a relaunch follows)\n")
        self.client: Optional[Client] = None
        if rank != 0 or self.coord is not None:
            self.client = Client(rank, self._deliver, coordinator=self.coord, addr=coord_addr,
                                 port=lr.in_place)

    def _deliver(self, ev: Tuple[str, int]) -> None:
        """The coordinator's word, to where the adapter waits; a restart first wakes the next
        attempt's spare and, on rank 0, has it listen on the new rendezvous port (prestart.py).

        A restart to an attempt this rank went on to is dropped: the client sets ``latest``
        first, and the failing rank goes on by it (:meth:`_wait`, :meth:`next`, under this lock):
        late, the word would tear down the attempt it announced (its spare given up)."""
        with self.deliver_lock:
            if ev[0] == "restart" and ev[1] <= self.told:
                return
            spare, client = self.spare, self.client
            if ev[0] == "restart":    # the restart's phases: told (attempts/restart.py)
                self.told = ev[1]
                status.life(self.rank, self.host, "worker", "restart", code=ev[1])
                if self.sched_spare is not None:
                    self.sched_spare.wake()
                if spare is not None and client is not None and client.latest:
                    spare.wake()
                    if ev[1] not in client.held:   # the holder's port: no store of its own
                        spare.listen(client.latest[1])
            self.inbox.put(ev)

    def restartable(self) -> bool:
        """A failure of this attempt is restarted in place (not the budget's last)."""
        return self.client is not None and self.k < self.last

    def supervisor(self, specs: Sequence[ChildSpec], rank: int, hostname: str, *, scheduler_grace: float,
                   pipe_size: int, tell_rank0: bool) -> InPlaceSupervisor:
        worker = next((s for s in specs if s.role == "worker"), None)
        learn = (self.restartable() and worker is not None and worker.env.get(LEARN_VAR) != "0"
                 and bool(spare_modules(worker, self.argv, self.opts)))
        sup = InPlaceSupervisor(specs, rank, hostname, quiet=self.restartable(), spare=self.spare,
                                learn=learn, scheduler_grace=scheduler_grace, pipe_size=pipe_size,
                                tell_rank0=tell_rank0, sched_spare=self.sched_spare)
        self.spare = self.sched_spare = None
        attach(self.holder, sup)    # the job's store holder outlives every attempt's supervisor
        return sup

    def started(self, sup: InPlaceSupervisor) -> None:
        """``sup`` takes the events: start the next attempt's spare worker, and watch for the
        worker's first output (the coordinator's no-progress rule: coordinate.no_progress)."""
        worker, planned, lr = sup.children.get("worker"), sup.worker_spec, self.opts.resilience
        if self.restartable() and worker is not None and self.coord and not self.holder:
            self.holder = start_holder(sup, self.argv, self.opts, self.coord)
        if self.restartable() and worker is not None and planned is not None:   # both or neither
            self.spare = start_spare(sup, planned, self.argv, self.opts)
            sched = sup.children.get("scheduler")
            if sched is not None:
                self.sched_spare = start_spare(sup, sched.spec, self.argv, self.opts)
            if sup.learn:
                if self.learner is not None:
                    self.learner.stop()
                debug = f"rank {sup.rank}" if planned.env.get(DEBUG_SPARE_VAR) else ""
                self.learner = Learner(self.known, lambda: sup.channel, lambda: self.spare,
                                       debug)
            if lr is not None and lr.no_progress:   # never None here (__init__)
                from mpilaunch.rank import firstout

                self.first_output = None
                self.watch = firstout.watch(worker.spec.log_path, self._first_output)

    def _first_output(self) -> None:
        self.first_output = time.time()

    def attempt_opts(self) -> Options:
        """``opts`` with this attempt's log dir (its heartbeat and stacks)."""
        return self.opts._replace(log_dir=attempt_dir(self.opts.log_dir, self.k))

    def next(self, sup: InPlaceSupervisor, rc: int) -> Optional[List[ChildSpec]]:
        """After an attempt that no stop signal ended: the next attempt's children, or None
        when the rank ends here (with :attr:`status`)."""
        if sup.jobdone is not None and sup.jobdone.sock is not None:
            sup.jobdone.sock.close()
        if self.watch is not None and rc == RESTART:
            self.watch.done.set()
        if self.learner is not None:
            self.learner.stop()
        for spare in (self.spare, self.sched_spare):   # the next attempt's: wanted now, likely
            if spare is not None:
                spare.wake()
        if rc != RESTART:
            end = self._between(sup, rc)
            if end is not None:
                self.status = end
                return None
        assert self.client is not None and self.client.latest is not None   # a restart came
        with self.deliver_lock:    # a late word of this restart is dropped from now on
            k, port = self.client.latest
            if self.told < k:      # and the phases' "told" line is this rank's now, before
                self.told = k      # its "stopped" (attempts/phases.py reads them in order)
                status.life(self.rank, self.host, "worker", "restart", code=k)
        # the last attempt's children are gone: the restart's teardown is over here
        status.life(self.rank, self.host, "worker", "stopped", code=self.k)
        self.k = k
        # the word said rank 0's holder listens on port: every worker its client (hold.py)
        return agent_store(self.specs_for(k, port), k in self.client.held, self, self.holder)

    def stopped(self, sup: InPlaceSupervisor) -> None:
        """``sup`` was torn down by a stop signal: the failures it held back, reported."""
        sup.flush()

    def _between(self, sup: InPlaceSupervisor, rc: int) -> Optional[int]:
        """Attempt ``k`` ended with ``rc`` by itself: the rank's status if it ends, None when
        the coordinator restarts the attempt."""
        client = self.client
        if client is None or not self.restartable():
            return rc
        if rc == 0:     # wait for the others: one may still fail and restart everyone
            if not client.done(self.k):
                return 0
            got = self._wait()
            return 128 + got[1] if got[0] == "signal" else 0 if got[0] == "finish" else None
        info = sup.failure_info()
        if info is not None and self.watch is not None:
            self.watch.stop()
            info["first_output"] = self.first_output
        if info is None or not client.fail(self.k, info):
            sup.flush()
            return rc
        got = self._wait()
        if got[0] == "signal":
            sup.flush()
            return 128 + got[1]
        if got[0] == "end":     # not restarted in place: the ordinary failure
            sup.flush()
            return rc
        return None

    def _wait(self) -> Tuple[str, int]:
        """Between attempts: the next restart, the finish of attempt ``k``, or a stop signal."""
        waiting, client, k = self.inbox.waiting, self.client, self.k
        assert client is not None          # only a restartable attempt waits
        old = {s: signal.signal(s, lambda n, f: waiting.put(("signal", n)))
               for s in TEARDOWN_SIGNALS}
        try:
            while True:
                if client.latest is not None and client.latest[0] > k:
                    return ("restart", client.latest[0])
                if client.finished >= k:
                    return ("finish", k)
                if client.ended >= k:
                    return ("end", k)
                ev = waiting.get()
                if ev[0] == "signal":
                    return ev
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def close(self) -> None:
        if self.watch is not None:
            self.watch.done.set()
        if self.learner is not None:
            self.learner.stop()
        for spare in (self.spare, self.sched_spare):
            if spare is not None:
                spare.discard()
        for part in (self.holder, self.client, self.coord):    # every worker is gone by now
            if part is not None:
                part.close()


def attempt_dir(log_dir: str, k: int) -> str:
    """Attempt ``k``'s log dir, beside ``log_dir`` (another attempt's: LOG_DIR/attempt<j>)."""
    return attempt_log_dir(os.path.dirname(os.path.normpath(log_dir)), k)
