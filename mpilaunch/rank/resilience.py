"""Long jobs, rank side: the restart count in the worker's environment, the span
check, the graceful stop and the stall watchdog around :class:`~mpilaunch.rank.supervisor.Supervisor`
(:class:`Hooks`, which rank/runner.py calls).

**Graceful stop** (``--term-grace S``). The launcher asks for it over its control channel
(``rank/control.py``: a ``stop`` command only the launcher can make; a user's SIGUSR1 is the
worker's, docs/ARCHITECTURE.md "Signals"). A stop signal the adapter gets itself
(SIGTERM/SIGINT/SIGHUP: Slurm's ``scancel`` and time limit signal every process of the job;
the starter's own teardown) is taken the same way. Either way the adapter sends SIGTERM to
its children and waits up to ``S`` s for them (instead of the usual 2 s) before SIGKILL;
then it writes a ``grace-stop`` status line (its ``signal``: the stop signal it got itself,
0 for the launcher's command) and exits **0**, so the starter does not tear the other ranks
down while they are still saving (a rank exiting non-zero makes mpirun kill the job at once).
The launcher knows whether it asked: a stop it did not ask for becomes the same graceful stop
for every rank, and the job's status 128 + that signal (restart.py).

Under ``--exec`` there is no adapter to do this: the launcher refuses ``--term-grace`` there.
"""
from __future__ import annotations

import _signal as signal   # not signal: its enums cost every rank (docs/ARCHITECTURE.md, start-up)
from collections import namedtuple

from mpilaunch import contract
from mpilaunch.contract import GRACE_EVENT   # the status line after a graceful stop (launcher: restart.py)
from mpilaunch.errors import UsageError

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Callable, Mapping, Optional, Protocol, Tuple

    from mpilaunch.rank.identity import RankInfo
    from subprocess import Popen

    from mpilaunch.rank.spawn import Child
    from mpilaunch.rank.watchdog import Watchdog

    # What of rank/supervisor.py's Supervisor this module reads: that module's imports lead
    # back here (plan, options), so the checker reads it through these.
    class Spec(Protocol):
        @property
        def env(self) -> Mapping[str, str]: ...
        @property
        def log_path(self) -> str: ...

    class Started(Protocol):
        @property
        def spec(self) -> Spec: ...
        @property
        def proc(self) -> Optional[Child | Popen[bytes]]: ...
        @property
        def status(self) -> Optional[int]: ...

    class Supervisor(Protocol):
        signal_grace: Optional[float]
        @property
        def stop_signal(self) -> Optional[int]: ...
        @property
        def children(self) -> Mapping[str, Started]: ...
        def run(self) -> int: ...

    class Given(Protocol):
        """The long-job flags as parsed (rank/options.py): each one's text, None when not given."""
        restart_count: Optional[str]; max_restarts: Optional[str]; term_grace: Optional[str]   # noqa: E702
        stall_timeout: Optional[str]; expect_ranks: Optional[str]   # noqa: E702

    class Opts(Protocol):
        """What of rank/options.py's Options this module reads (that module imports this one)."""
        @property
        def resilience(self) -> Optional[ResilienceFlags]: ...
        @property
        def exec_(self) -> bool: ...
        @property
        def log_dir(self) -> str: ...

RESTART_VARS = ("MPILAUNCH_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT")
MAX_VARS = ("MPILAUNCH_MAX_RESTARTS", "TORCHELASTIC_MAX_RESTARTS")


class ResilienceFlags(namedtuple("ResilienceFlags", "restart_count max_restarts term_grace stall_timeout expect "
                         "in_place no_progress", defaults=(None, None))):
    """restart_count, max_restarts: int or None; term_grace, stall_timeout: float or None;
    expect: the ``--expect-ranks`` spec (str) or None; in_place: the coordinator's port of
    in-place restarts (rank/inplace/loop.py) or None; no_progress: how many quick failures in
    a row the coordinator restarts in place (``--in-place-no-progress``; None: no limit)."""

    __slots__ = ()


# a launch without the long-job flags: the launcher's graceful stop alone (its grace in its
# stop command)
NO_FLAGS = ResilienceFlags(None, None, None, None, None)


def parse(ns: Given) -> ResilienceFlags:
    def whole(value: object, flag: str) -> Optional[int]:
        return None if value is None else contract.whole(value, flag, 0)

    def secs(value: object, flag: str) -> Optional[float]:
        return None if value is None else contract.seconds(value, flag, allow_zero=True)

    if ns.expect_ranks is not None:
        from mpilaunch.rank import span

        span.parse(ns.expect_ranks)
    in_place = getattr(ns, "in_place", None)
    return ResilienceFlags(whole(ns.restart_count, "--restart-count"),
                   whole(ns.max_restarts, "--max-restarts"),
                   secs(ns.term_grace, "--term-grace"), secs(ns.stall_timeout, "--stall-timeout"),
                   ns.expect_ranks,
                   None if in_place is None else contract.whole(in_place, "--in-place", 1, 65535),
                   whole(getattr(ns, "in_place_no_progress", None), "--in-place-no-progress"))


def early(opts: Opts) -> None:
    """As soon as the options are read: what the graceful stop cannot do."""
    lr = opts.resilience
    if lr is None or lr.term_grace is None:
        return
    if opts.exec_:
        raise UsageError("--term-grace needs the supervised mode (not --exec)")


def prepare(opts: Opts, info: RankInfo, user_env: dict, span_check: bool = True) -> None:
    """Before the agreement: the span check, then the variables every worker sees."""
    lr = opts.resilience
    if lr is None:
        return
    if lr.expect is not None and span_check:
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


class Hooks:
    """The long-job flags around each supervisor's run (rank/runner.py): ``--term-grace``
    (the launcher's stop command taken as a SIGTERM, the kill grace, the ``grace-stop`` status
    line) and ``--stall-timeout`` (the watchdog). ``deliver``: where an event for the running
    supervisor goes (runner.Inbox.put)."""

    def __init__(self, lr: ResilienceFlags, deliver: Callable[[Tuple[str, int]], None]) -> None:
        self.lr, self.deliver = lr, deliver
        self.asked = False      # the launcher asked for the graceful stop (not a signal)
        self.sup: Optional[Supervisor] = None         # the supervisor running (run)
        self.grace = lr.term_grace   # the kill grace of a stop: --term-grace, or the launcher's

    def on_stop(self, grace: Optional[float] = None) -> None:
        """The launcher's ``stop`` (the control thread), with its grace (None: ``--term-grace``):
        the same teardown as a SIGTERM, the workers given the grace before SIGKILL."""
        if self.lr.term_grace is None and grace is None or self.asked:
            return
        self.asked = True
        if self.lr.term_grace is None:
            self.grace = grace
            if self.sup is not None:    # before the SIGTERM reaches it (run's thread)
                self.sup.signal_grace = grace
        self.deliver(("signal", signal.SIGTERM))

    def run(self, sup: Supervisor, opts: Opts, rank: int, hostname: str) -> int:
        """``sup.run()`` with the kill grace of ``--term-grace`` and the stall watchdog
        (heartbeat and stacks in ``opts.log_dir``)."""
        self.sup = sup
        if self.grace is not None:
            sup.signal_grace = self.grace
        dog = None
        if self.lr.stall_timeout:
            dog = start_watchdog(sup, opts, rank, hostname, self.lr.stall_timeout)
        try:
            return sup.run()
        finally:
            if dog is not None:
                dog.done.set()

    def stopped(self, sup: Supervisor, rank: int, hostname: str, rc: int) -> int:
        """The rank's status after ``sup`` was torn down by a stop signal: under
        ``--term-grace`` a ``grace-stop`` status line and 0, else ``rc``."""
        if self.lr.term_grace is None and not self.asked:
            return rc
        from mpilaunch.rank import status

        got = 0 if self.asked and sup.stop_signal == signal.SIGTERM else sup.stop_signal
        status.emit(rank, hostname, "adapter", GRACE_EVENT, rc, got, "grace", None)
        return 0


def start_watchdog(sup: Supervisor, opts: Opts, rank: int, hostname: str, timeout: float) -> Optional[Watchdog]:
    from mpilaunch.rank import pyspy, watchdog

    worker = sup.children.get("worker")
    if worker is None:
        return None

    def pid_of() -> Optional[int]:
        return worker.proc.pid if worker.proc is not None else None

    dog = watchdog.Watchdog(timeout, worker.spec.log_path,
                            watchdog.heartbeat_path(opts.log_dir, rank),
                            watchdog.stacks_path(opts.log_dir, rank), pid_of, rank, hostname,
                            pyspy.find(worker.spec.env.get("PATH")),
                            status_of=lambda: worker.status)
    dog.start()
    return dog
