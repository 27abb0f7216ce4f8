"""Whether a next attempt comes (:func:`judge`), and each attempt's configuration: its log dir
(``LOG_DIR/attempt<k>/``), its port, rank 0's address, and the adapter flags of the resilience
settings (restart count, grace, watchdog, the span check, in-place coordination); and, when the
user gave the port, the wait until the last attempt has let go of it."""
import enum
import os
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, NamedTuple, Optional, Sequence

from mpilaunch import contract, net
from mpilaunch.backends import placement, rankcmd
from mpilaunch.config import allocation
from mpilaunch.config import resilience
from mpilaunch.errors import UsageError
from mpilaunch.supervise.attempt import AttemptRecord

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig

PORT_WAIT = 60.0


class State(enum.Enum):
    """What the job does once an attempt has ended (:func:`judge`)."""

    SUCCEEDED = "succeeded"
    STOPPED = "stopped"                 # a stop signal to mpilaunch, during or between attempts
    USAGE_ERROR = "usage error"         # an adapter refused to start: it would fail again
    BUDGET_SPENT = "budget spent"       # --max_restarts relaunches made
    NO_PROGRESS = "no progress"         # --max_no_progress_restarts attempts in a row
    NO_HOSTS = "no hosts"               # the next attempt's hosts are not there
    RELAUNCH = "relaunch"               # the job goes on (relaunched, or restarted in place)


def judge(records: Sequence[AttemptRecord], lr: resilience.Resilience) -> State:
    """What the job does after the last of ``records`` (its restarts in place included): the
    one owner of the restart decision, asked by the loop of attempts after an attempt ended
    (attempts/loop.py) and by an attempt the adapters restarted in place
    (``restart.ResilientAttempt.in_place_event``). NO_HOSTS is the loop's, after it: the next
    attempt's hosts are not there."""
    last = records[-1]
    if last.status == 0:
        return State.SUCCEEDED
    if last.stopped_by is not None:
        return State.STOPPED
    if last.usage_error:
        return State.USAGE_ERROR
    if last.index >= lr.max_restarts:
        return State.BUDGET_SPENT
    if lr.max_no_progress:
        from mpilaunch.attempts import progress

        if progress.spent(records, lr.max_no_progress):
            return State.NO_PROGRESS
    return State.RELAUNCH


class Between(NamedTuple):
    """What the choice of attempt ``k``'s hosts reads, between attempt ``k - 1`` and it
    (health.before_relaunch, shrink.shrink, discovery.between): ``cfg``, the last attempt's
    (its resilience settings in it); ``master_addr``, the user's (a new set of hosts decides
    rank 0's address again unless the user gave it); ``last``, how the last attempt ended."""

    cfg: "LaunchConfig"
    master_addr: Optional[str]
    last: AttemptRecord
    k: int


def log_dir_of(lr: resilience.Resilience, k: int) -> str:
    """Where attempt ``k`` logs: a dir of its own (``LOG_DIR/attempt<k>``) when the job may
    restart, so nothing is overwritten; else LOG_DIR. Decided here only: the event record
    reads it from the attempt's plan, the attempts' summary from here."""
    return contract.attempt_log_dir(lr.log_dir, k) if lr.max_restarts else lr.log_dir


def attempt_cfg(cfg: "LaunchConfig", k: int) -> "LaunchConfig":
    """The config of attempt ``k``: its log dir, port and adapter flags."""
    lr = resilience.of(cfg)
    changes: Dict[str, Any] = {"log_dir": log_dir_of(lr, k)}
    spec = None
    if lr.span:
        spec = placement.expect_spec(cfg)
    # in place: rank 0's adapter coordinates on a port picked here (rank 0 elsewhere: a guess
    # that is free here; taken there, the job goes without in-place restarts: rank/inplace/loop.py)
    coord = net.free_port() if lr.in_place and k < lr.max_restarts else None
    extra = rankcmd.attempt_flags(k if lr.max_restarts else None, lr.max_restarts,
                                  lr.term_grace, lr.stall_timeout, spec, coord,
                                  lr.max_no_progress if coord and lr.max_no_progress else None)
    # Rank 0 elsewhere (a launcher outside the hostfile) is on the first host only where the
    # plan fills the slots in order; a placement of the user's own leaves it to the agreement.
    placed = lr.rank0_here or (spec or "").split(";")[1:2] == ["exact"]
    if lr.span and placed and not cfg.master_addr and not cfg.exec_mode and spec:
        addr = net.rank0_address(cfg.hosts, allocation.node_addr_lookup(cfg.hosts_from, os.environ))
        if addr:   # with the plan's node index, the adapters need no MPI agreement at all
            changes["master_addr"] = addr
    if k > 0 and not lr.port_given:   # a fresh port: nothing of the last attempt holds it
        changes["master_port"] = (net.free_port() if lr.rank0_here
                                  else cfg.master_port if cfg.exec_mode else 0)
    return cfg._replace(rank_extra=tuple(extra), **changes)


def wait_port_free(port: int, stopped: Callable[[], object]) -> None:
    end = time.monotonic() + PORT_WAIT
    while not stopped() and time.monotonic() < end:
        try:
            net.check_port(net.LOOPBACK, port, "", check_addr=False)
            return
        except UsageError:
            time.sleep(0.5)
