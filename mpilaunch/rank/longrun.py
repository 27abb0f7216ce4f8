"""Long jobs, rank side: the restart count in the worker's environment, the span
check, the graceful stop and the stall watchdog around :class:`~mpilaunch.rank.supervisor.Supervisor`.

**Graceful stop** (``--term-grace S``). The launcher asks for it by sending **SIGUSR1** to
mpirun, which both Open MPI 4.1 and 5.0 forward by default to every rank's *process group*
(measured: the adapter and its children all get it; docs/OPENMPI_FACTS.md section 16). So:

* the adapter blocks SIGUSR1 and sets it to ignored as soon as it starts: a blocked signal
  stays pending on Linux even when ignored, and a helper thread takes it with ``sigwait``;
* the children start with the signal unblocked (the supervisor's pre-exec hook clears the
  mask) and, by exec, still **ignored**: a worker (and whatever it starts) is never killed
  by the forwarded SIGUSR1; a script may still install its own SIGUSR1 handler;
* on SIGUSR1 the adapter sends SIGTERM to its children and waits up to ``S`` s for them
  (instead of the usual 2 s) before SIGKILL; then it writes a ``grace-stop`` status line and
  exits **0**, so Open MPI does not tear the other ranks down while they are still saving (a
  rank exiting non-zero would make mpirun kill the job at once). The adapter cannot tell who
  sent the signal (a file in the launcher's run dir is not seen on other hosts); the
  launcher can: after a stop it asked for it reports the stop (exit 128+N), after a
  ``grace-stop`` it did not ask for (SIGUSR1 sent to mpirun or a rank by something else) the
  job failed with 128+SIGUSR1, as it would have without ``--term-grace`` (restart.py).

Under ``--exec`` there is no adapter to do this: the launcher refuses ``--term-grace`` there.
"""
from __future__ import annotations

import signal
from collections import namedtuple

from mpilaunch import contract
from mpilaunch.errors import UsageError

GRACE_SIGNAL = signal.SIGUSR1
GRACE_EVENT = "grace-stop"      # the status line after a graceful stop (launcher: restart.py)
RESTART_VARS = ("MPILAUNCH_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")
MAX_VARS = ("MPILAUNCH_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS")


class LongRun(namedtuple("LongRun", "restart_count max_restarts term_grace stall_timeout expect")):
    """restart_count, max_restarts: int or None; term_grace, stall_timeout: float or None;
    expect: the ``--expect-ranks`` spec (str) or None."""

    __slots__ = ()


def parse(ns) -> LongRun:
    def whole(value, flag):
        return None if value is None else contract.whole(value, flag, 0)

    def secs(value, flag):
        return None if value is None else contract.seconds(value, flag, allow_zero=True)

    if ns.expect_ranks is not None:
        from mpilaunch.rank import span

        span.parse(ns.expect_ranks)
    return LongRun(whole(ns.restart_count, "--restart-count"),
                   whole(ns.max_restarts, "--max-restarts"),
                   secs(ns.term_grace, "--term-grace"), secs(ns.stall_timeout, "--stall-timeout"),
                   ns.expect_ranks)


def early(opts) -> None:
    """As soon as the options are read: keep a SIGUSR1 from killing the adapter (see above)."""
    lr = opts.longrun
    if lr is None or lr.term_grace is None:
        return
    if opts.exec_:
        raise UsageError("--term-grace needs the supervised mode (not --exec)")
    signal.pthread_sigmask(signal.SIG_BLOCK, (GRACE_SIGNAL,))
    signal.signal(GRACE_SIGNAL, signal.SIG_IGN)


def prepare(opts, info, user_env: dict) -> None:
    """Before the agreement: the span check, then the variables every worker sees."""
    lr = opts.longrun
    if lr is None:
        return
    if lr.expect is not None:
        from mpilaunch.rank import span

        span.check(lr.expect, info)
    if lr.restart_count is not None:
        for name in RESTART_VARS:
            user_env[name] = str(lr.restart_count)
    if lr.max_restarts is not None:
        for name in MAX_VARS:
            user_env[name] = str(lr.max_restarts)
    if lr.stall_timeout:
        from mpilaunch.rank import watchdog

        user_env[watchdog.HEARTBEAT_VAR] = watchdog.heartbeat_path(opts.log_dir, info.rank)


def supervise(specs, opts, rank: int, hostname: str, local_size: int = 1) -> int:
    """:func:`mpilaunch.rank.supervisor.supervise` with the graceful stop and the watchdog."""
    from mpilaunch.rank.relay import PIPE_SIZE, PIPE_SIZE_MANY_RANKS
    from mpilaunch.rank.supervisor import Supervisor

    lr = opts.longrun
    sup = Supervisor(specs, rank, hostname, scheduler_grace=opts.scheduler_grace,
                     pipe_size=PIPE_SIZE if local_size <= 8 else PIPE_SIZE_MANY_RANKS,
                     tell_rank0=not opts.no_scheduler)
    state = {"graceful": False}
    if lr.term_grace is not None:
        _start_grace_thread(sup, lr.term_grace, state)
    dog = None
    if lr.stall_timeout:
        dog = _watchdog(sup, opts, rank, hostname, lr.stall_timeout)
    try:
        rc = sup.run()
    finally:
        if dog is not None:
            dog.done.set()
    if not state["graceful"]:
        return rc
    from mpilaunch.rank import status

    status.emit(rank, hostname, "adapter", GRACE_EVENT, rc, int(GRACE_SIGNAL), "grace", None)
    return 0


def _start_grace_thread(sup, grace: float, state: dict) -> None:
    import threading

    def wait_for_signal():
        signal.sigwait((GRACE_SIGNAL,))
        state["graceful"] = True
        sup.kill_grace = grace           # SIGTERM, then up to the grace before SIGKILL
        sup.events.put(("signal", signal.SIGTERM))

    old = signal.pthread_sigmask(signal.SIG_BLOCK, (signal.SIGTERM, signal.SIGINT,
                                                    signal.SIGHUP, signal.SIGCHLD))
    try:
        threading.Thread(target=wait_for_signal, name="grace", daemon=True).start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _watchdog(sup, opts, rank: int, hostname: str, timeout: float):
    from mpilaunch.rank import watchdog

    worker = sup.children.get("worker")
    if worker is None:
        return None

    def pid_of():
        return worker.proc.pid if worker.proc is not None else None

    dog = watchdog.Watchdog(timeout, worker.spec.log_path,
                            watchdog.heartbeat_path(opts.log_dir, rank),
                            watchdog.stacks_path(opts.log_dir, rank), pid_of, rank, hostname,
                            watchdog.find_py_spy(worker.spec.env.get("PATH")),
                            status_of=lambda: worker.status)
    dog.start()
    return dog
