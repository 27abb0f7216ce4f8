"""What every way of starting ranks provides: :class:`Backend`, and :class:`LaunchPlan`, the
plan of a launch over a hostfile (Open MPI's mpirun, Hydra's mpiexec).

``supervise/starter.run_attempt`` supervises any backend through this protocol and nothing else: it writes the
backend's files, starts its argv with its environment, relays its output into a
:class:`~mpilaunch.output.summary.Collector` whose text the backend reads (:meth:`Backend.notices`,
:meth:`Backend.lost_hosts`), lets it watch the running job (:meth:`Backend.watch`), and lets it
clean up what it leaves behind (:meth:`Backend.cleanup`). The job's exit status is decided from
what was learnt, in one place (``mpilaunch/output/outcome.py``), the same way for every backend.
"""
from __future__ import annotations

import os
import re
import signal
from collections import namedtuple
from typing import (TYPE_CHECKING, Any, Dict, FrozenSet, Generic, Iterator, List, Mapping, Optional,
                    Sequence, Tuple, TypeVar)

from mpilaunch import contract
from mpilaunch.config import mpiargs

if TYPE_CHECKING:
    from typing import Protocol

    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.config.mpi import MpiInfo
    from mpilaunch.output.summary import Collector, Event

    class RunningJob(Protocol):
        """What a backend's watch asks of the running starter (supervise/starter.py's Job)."""

        pid: int

        def end(self, escalate: float = ...) -> None: ...

        def host_lost(self, hosts: List[str], escalate: float) -> None: ...
else:
    RunningJob = object   # a type only: a Protocol class costs every launch its making

# ssh's own words when the connection that started a remote daemon or proxy ended under it
SSH_CLOSED = ("closed by remote host", r"Connection to (\S+) closed by remote host")


def find_all(words: Tuple[str, str], text: str) -> Iterator["re.Match[str]"]:
    """``re.finditer`` of ``words`` (a literal every match holds, the pattern) in ``text``. The
    starters' messages are read this way, not with patterns compiled at import: those cost every
    launch before its starter started, and a launch whose starter never says the literal
    compiles none (docs/ARCHITECTURE.md, start-up)."""
    literal, pattern = words
    return re.finditer(pattern, text) if literal in text else iter(())


class Plan:
    """What the launcher's supervision (supervise/, stacks/server.py) reads of any backend's plan,
    with the value of a plan that does not say. Every plan class derives from it (a namedtuple
    first, then this: its fields are the values); a field of the plan overrides the default.

    np           the world size
    hosts        the hosts (``hf.Host``), in order; () when the starter places the ranks
    args         the starter's own options (the start-up line reads the placement from them)
    rank_command what every rank runs: the adapter and its flags, ``--``, the script
    stdin        the ``--stdin`` target (as :attr:`LaunchPlan.stdin`)
    scheduler    (started on rank 0, why) or None, for the failure summary
    dropped_x    ``-x NAME`` left out because NAME is unset
    exec_mode    ``--exec``: the adapter execs the program (no control channel, no supervision)
    log_dirs     where ``mpilaunch stacks`` finds the job: the ranks' log dir, then the job's
                 own when that is an attempt's (``LOG_DIR/attempt<k>``); () when none is named
    hostfile_path, tune_path  the files in the run dir the starter reads (every plan names
                 both, used or not: rundir.remove_files removes them after the attempt)
    extra_env    the starter's environment additions (:meth:`Backend.env`)
    start_checks the launch config whose hosts the ssh checks check after a failed start, when
                 they were left for then (:func:`explains_own_start`; run.py), or None
    """

    __slots__ = ()
    np: int = 0
    hosts: Tuple[Any, ...] = ()
    args: Tuple[str, ...] = ()
    rank_command: Tuple[str, ...] = ()
    stdin: Optional[str] = None
    scheduler: Optional[Tuple[bool, str]] = None
    dropped_x: Tuple[str, ...] = ()
    exec_mode: bool = False
    log_dirs: Tuple[str, ...] = ()
    hostfile_path: str = ""
    tune_path: str = ""
    extra_env: Mapping[str, str] = {}
    start_checks: Optional[LaunchConfig] = None

    if TYPE_CHECKING:   # every plan is a namedtuple (its class comes first)
        def _replace(self: "PlanT", *, stdin: Optional[str] = ...) -> "PlanT": ...


PlanT = TypeVar("PlanT", bound=Plan)


def explains_own_start(backend: "Backend[Any]", cfg: LaunchConfig) -> bool:
    """The rule of a launch whose ssh checks come after a failed start instead of before it
    (run.py decides by it; the plan's ``start_checks`` carries its config to the backend's
    :meth:`Backend.after`): the backend explains a failed start itself, and the ssh options
    are mpilaunch's to give (none of the user's own in the MCA args, which mpilaunch does not
    amend)."""
    return backend.explains_start and not mpiargs.ssh_params_given(cfg.mpi_pieces)


def plan_facts(cfg: LaunchConfig) -> Dict[str, Any]:
    """The fields of :class:`Plan` every backend's plan takes from the launch config as they
    are (a plan's constructor gets them as keywords), so that no reader of the plan has to
    parse its rank command for them."""
    dirs: Tuple[str, ...] = ()
    if cfg.log_dir:
        own = os.path.abspath(cfg.log_dir)
        lr = cfg.resilience
        job = os.path.abspath(lr.log_dir) if lr is not None and lr.log_dir else own
        dirs = (own,) if job == own else (own, job)
    return {"exec_mode": bool(cfg.exec_mode), "log_dirs": dirs}


class LaunchPlan(namedtuple("LaunchPlan", "mpi hosts np oversubscribe run_as_root ssh broadcast args "
                            "dropped_x hostfile_path tune_path rank_command extra_env noprefix stdin "
                            "scheduler ssh_config exec_mode log_dirs start_checks",
                            defaults=({}, False, None, None, None, False, (), None)), Plan):
    """mpi: MpiInfo;
    hosts: Tuple[hf.Host, ...];
    np: int;
    oversubscribe: bool;
    run_as_root: bool;
    ssh: Tuple[str, ...] # the starter's tokens carrying the ssh options;
    broadcast: tune.Broadcast;
    args: Tuple[str, ...] # bind + x + mca + extra, in this starter's words;
    dropped_x: Tuple[str, ...] # '-x NAME' removed because NAME is unset;
    hostfile_path: str;
    tune_path: str;
    rank_command: Tuple[str, ...];
    extra_env: Mapping[str, str] # the launcher process's environment additions (secrets, ...);
    noprefix: bool # Open MPI 4 by absolute path acts as --prefix: PATH gets its bin first.
    stdin: the --stdin target: a rank, all, none; None: rank 0, or none when the launcher's
        stdin is closed or /dev/null (supervise/relays.stdin_target; neither is written);
    scheduler: (started on rank 0: bool, why: str) or None, for the failure summary;
    ssh_config: (path, text) of the job's ssh configuration (config/sshconfig.py) or None;
    exec_mode, log_dirs, start_checks: as :class:`Plan`'s.
    (A namedtuple: see docs/ARCHITECTURE.md, "How the adapter starts".)"""

    __slots__ = ()


def with_routed(plan: LaunchPlan, names: Sequence[str]) -> LaunchPlan:
    """``names`` exported to every rank with their values in the starter's environment
    (Open MPI's ``-x NAME``, Hydra's ``-genvlist``): the control channel's variables."""
    routed = plan.broadcast.routed + tuple(n for n in names if n not in plan.broadcast.routed)
    return plan._replace(broadcast=plan.broadcast._replace(routed=routed))


class Backend(Generic[PlanT]):
    """One way of starting ranks. Subclasses set :attr:`name` and implement :meth:`plan`,
    :meth:`argv`; everything else has a default that does nothing. ``PlanT``: the class of the
    backend's plans (:class:`LaunchPlan` for a hostfile's starters, srun's own)."""

    #: the starter program, as messages call it ("mpirun", "mpiexec", "srun")
    program = "mpirun"
    #: the --max_restarts / --term-grace / --stall-timeout support: a missing one is refused
    #: before anything starts, naming the backend
    resilience: Tuple[str, ...] = ("max_restarts", "term_grace", "stall_timeout")
    #: the ranks check that they run where the hostfile placed them (``span.py``)
    span_check = True
    #: how the summary explains a lost host
    lost_why = "the starter lost its daemon there"
    #: the signals the starter delivers to every rank when it gets them (measured for each:
    #: docs/OPENMPI_FACTS.md section 16); the launcher sends the others of SIGUSR1, SIGUSR2,
    #: SIGTSTP, SIGCONT over its control channel (docs/ARCHITECTURE.md, "Signals")
    forwards: FrozenSet[int] = frozenset()
    #: the backend explains a failed start itself (its starter names the host whose daemon did
    #: not report back): no ssh preflight before the launch, its checks after a failed start
    #: (:func:`explains_own_start`); Open MPI's
    explains_start = False

    def __init__(self, mpi: Optional[MpiInfo] = None) -> None:
        self.mpi = mpi

    @property
    def name(self) -> str:
        """For messages: 'Open MPI 5.0.11', 'MPICH 5.0.2', 'srun (--mpi=pmix)'."""
        return self.mpi.name if self.mpi is not None else self.program

    # -- deciding (pure)
    def configure(self, cfg: LaunchConfig, env: Mapping[str, str]) -> LaunchConfig:
        """The launch config with what this backend decides before the plan (default: as is)."""
        return cfg

    def plan(self, cfg: LaunchConfig, env: Mapping[str, str], run_dir: str, euid: int) -> PlanT:
        raise NotImplementedError

    def argv(self, plan: PlanT) -> List[str]:
        raise NotImplementedError

    def files(self, plan: PlanT) -> List[Tuple[str, str]]:
        """(path, text) of each file the starter reads, written 0600 before it starts."""
        return []

    def env(self, plan: PlanT) -> Mapping[str, str]:
        """Additions to the starter's environment."""
        return plan.extra_env

    def stdin(self, plan: PlanT) -> Optional[str]:
        """The --stdin target, as :attr:`LaunchPlan.stdin`."""
        return plan.stdin

    def with_stdin(self, plan: PlanT, target: str) -> PlanT:
        return plan._replace(stdin=target)

    def with_control(self, plan: PlanT, names: Sequence[str]) -> PlanT:
        """The plan with ``names`` (variables the launcher puts in the starter's environment)
        exported to every rank (default: as is, for a starter that exports everything)."""
        return plan

    def show(self, plan: PlanT, env: Mapping[str, str]) -> None:
        """``--dry-run``: print what would be run."""
        raise NotImplementedError

    def dropped(self, plan: PlanT) -> Sequence[str]:
        """Names of ``-x NAME`` left out because NAME is unset (``--verbose`` says so)."""
        return plan.dropped_x

    # -- reading its output (pure)
    def notices(self, text: str) -> List[Event]:
        """Failures the starter reports on its own (a rank whose adapter died without a status
        line, a process of ``--exec``), as :class:`~mpilaunch.output.summary.Event`, first first."""
        return []

    def lost_hosts(self, text: str) -> List[str]:
        """Hosts the starter says it lost, in the order first seen (default: those whose ssh
        connection was closed by the remote host)."""
        return [m.group(1).rstrip(".,") for m in find_all(SSH_CLOSED, text)]

    # -- doing
    def watch(self, plan: PlanT, job: RunningJob) -> None:
        """Called once the starter runs (``job``: :class:`mpilaunch.supervise.starter.Job`): start any
        watcher the starter needs, e.g. to end the job where it would not end by itself."""

    def on_rank_failure(self, plan: PlanT, job: RunningJob) -> None:
        """A rank reported its own failure (exit code or signal)."""

    def after(self, plan: PlanT, collector: Collector, status: int) -> None:
        """After the starter ended with ``status``, not stopped by the user: learn what its
        output did not say (e.g. which host is unreachable), into ``collector``."""

    def cleanup(self, pid: int, returncode: int) -> None:
        """What the starter leaves behind when it was killed (``returncode`` < 0)."""


def show_files(plan: "LaunchPlan", env: Mapping[str, str], files: Sequence[Tuple[str, str]],
               carried: str) -> None:
    """``--dry-run``'s part after the argv, for a launch over a hostfile: each file the starter
    reads, then what travels in its environment instead (``carried``: how, in its words), and
    the ``-x NAME`` left out; secrets masked."""
    import sys


    for path, text in files:
        label = ("hostfile" if path == plan.hostfile_path else "ssh config"
                 if plan.ssh_config and path == plan.ssh_config[0] else "tune file")
        print(f"# {label} {path}:")
        sys.stdout.write("".join(f"#   {line}\n" for line in text.splitlines()))
    if plan.broadcast.routed:
        print(f"# carried in {carried}: " + ", ".join(
            f"{n}={contract.MASK}" if contract.is_secret(n)
            else f"{n}={env.get(n, plan.extra_env.get(n))!r}" for n in plan.broadcast.routed))
    if plan.dropped_x:
        print("# dropped (unset here): " + " ".join(f"-x {n}" for n in plan.dropped_x))
