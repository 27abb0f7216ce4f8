"""The resilience settings, checked where the configuration is built: ``--max_restarts``,
``--max_no_progress_restarts``, ``--restart-mode``, ``--restart-delay``, ``--term-grace``, ``--stall-timeout``, ``--min-hosts``,
``--no-span-check`` and ``--host-discovery-script`` (what each does: docs/LONG_JOBS.md; the
launcher's part: mpilaunch/attempts/). A setting the chosen backend cannot honour is refused by
:func:`for_backend`, still before anything starts."""
import argparse
import os
from typing import TYPE_CHECKING, Mapping, NamedTuple, Optional, Sequence, Tuple

from mpilaunch import contract, net
from mpilaunch.config import options, programs, torchrun
from mpilaunch.errors import UsageError

if TYPE_CHECKING:
    from typing import Protocol

    from mpilaunch.config.hostfile import Host

    class LaunchConfig(Protocol):
        """What the resilience settings read of the launch (config/launchconfig.py's
        LaunchConfig, which holds them: importing it here would be a cycle)."""

        @property
        def log_dir(self) -> str: ...
        @property
        def hosts(self) -> Tuple[Host, ...]: ...
        @property
        def hosts_source(self) -> str: ...
        @property
        def exec_mode(self) -> bool: ...
        @property
        def script(self) -> Optional[str]: ...
        @property
        def module(self) -> Optional[str]: ...
        @property
        def script_args(self) -> Tuple[str, ...]: ...
        @property
        def no_python(self) -> bool: ...
        @property
        def resilience(self) -> Optional[Resilience]: ...

    class _Backend(Protocol):
        """What :func:`for_backend` reads of a backend (backends/base.py's Backend)."""

        resilience: Tuple[str, ...]
        span_check: bool

        @property
        def name(self) -> str: ...

MODES = ("in-place", "relaunch")
# The graceful stop's grace when --term-grace is not given: a stop signal to mpilaunch gives
# every worker SIGTERM and this long before SIGKILL. Slurm's KillWait and Kubernetes'
# terminationGracePeriodSeconds both default to 30 s; 20 s plus the launcher's margin after it
# (supervise/attempt.py GRACE_MARGIN, 5 s) and the teardown still end inside those 30 s. A worker without a
# handler dies of the SIGTERM at once, so the default costs it nothing.
DEFAULT_TERM_GRACE = 20.0
DISCOVERY_FLAG = "--host-discovery-script"


class Resilience(NamedTuple):
    """The resilience settings, validated, plus what each attempt needs from the first;
    ``in_place``: ``--restart-mode in-place`` (rank/inplace/); ``min_hosts``: ``--min-hosts``
    (None: off; mpilaunch/attempts/shrink.py); ``discovery_script``: the absolute path of
    ``--host-discovery-script`` (None: off; mpilaunch/attempts/discovery.py);
    ``max_no_progress``: ``--max_no_progress_restarts`` (0: no limit;
    mpilaunch/attempts/progress.py); ``mode_why``: where the restart mode came from (a flag,
    ``default``, or why the default is a relaunch for this launch: :func:`restart_mode`)."""

    max_restarts: int
    restart_delay: float
    term_grace: Optional[float]     # None: not asked for
    stall_timeout: Optional[float]  # None: not asked for
    span: bool                      # check that the ranks span the hosts
    log_dir: str
    port_given: bool                # --master_port named a port (0: each attempt picks one)
    rank0_here: bool
    in_place: bool = False
    min_hosts: Optional[int] = None
    discovery_script: Optional[str] = None
    max_no_progress: int = 0
    mode_why: str = "default"   # the restart mode's source: a flag, or why the default is what it is
    # the grace a stop signal to mpilaunch gives the workers (SIGTERM over the control channel,
    # then SIGKILL): --term-grace, else DEFAULT_TERM_GRACE; None: the starter's own stop
    # (--term-grace 0, --exec, a backend without the graceful stop)
    stop_grace: Optional[float] = None


def of(cfg: "LaunchConfig") -> Resilience:
    """The run command's settings, as the launch holds them (``cfg.resilience``: set by
    launchconfig.build for the run command, adjusted to the backend by run.py; check and job
    have none)."""
    lr = cfg.resilience
    if lr is None:
        raise TypeError("this launch config has no resilience settings (not the run command's)")
    return lr


def script_path(raw: str, source: str = DISCOVERY_FLAG) -> str:
    """A discovery script's option value -> an absolute path of an executable file, or one
    usage line."""
    path = os.path.abspath(os.path.expanduser(str(raw).strip()))
    if not str(raw).strip() or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise UsageError(f"{source}={raw}: not an executable file")
    return path


def settings(args: argparse.Namespace, env: Mapping[str, str], cfg: "LaunchConfig") -> Resilience:
    """The resilience options of ``args`` (the run command's) for the launch ``cfg`` describes."""
    def seconds(dest: str) -> Optional[float]:
        raw, source = options.setting(args, {}, dest)
        return None if raw is None else contract.seconds(raw, source, allow_zero=True)

    raw, source = options.setting(args, env, "max_restarts")   # PET_MAX_RESTARTS: torchrun's
    n = contract.whole(raw, source, 0, 1000)
    mode, why = restart_mode(args, cfg, n)
    raw, source = options.setting(args, env, "host_discovery_script")
    script = None if raw is None else script_path(raw, source)
    grace = seconds("term_grace")
    # --term-grace 0: the starter's own immediate stop (as before the graceful stop was the
    # default); not given: the default grace for a stop signal to mpilaunch only (the adapters'
    # own stop signals stay the starter's teardown, as --term-grace would change them)
    stop_grace = (None if grace == 0 or (grace is None and cfg.exec_mode)
                  else DEFAULT_TERM_GRACE if grace is None else grace)
    lr = Resilience(n, seconds("restart_delay") or 0.0, grace or None, seconds("stall_timeout"),
                 not getattr(args, "no_span_check", False), cfg.log_dir,
                 str(getattr(args, "master_port", None) or "0").strip() != "0",  # 0: pick
                 net.rank0_is_here(cfg.hosts), mode == "in-place" and n > 0,
                 _min_hosts(args, env, n), script, _max_no_progress(args, n), why, stop_grace)
    if lr.stall_timeout == 0:
        raise UsageError(f"{options.BY_DEST['stall_timeout'].name}=0: give a number of seconds > 0")
    if cfg.exec_mode and lr.in_place:
        raise UsageError("--restart-mode in-place needs the supervised mode: the adapters "
                         "restart the workers (not --exec)")
    if cfg.exec_mode and (lr.term_grace is not None or lr.stall_timeout):
        raise UsageError("--term-grace and --stall-timeout need the supervised mode: the adapter "
                         "signals and watches the worker (not --exec)")
    if script is None:   # a discovery script's hosts are checked when it has listed them
        for_hosts(lr, cfg.hosts, cfg.hosts_source)
    return lr


def restart_mode(args: argparse.Namespace, cfg: "LaunchConfig", n: int) -> Tuple[str, str]:
    """(``in-place`` or ``relaunch``, why). Asked for: as asked. By default in place wherever
    the adapters can restart a worker inside the running job; a relaunch where they cannot:
    ``--exec`` (no adapter), or an MPI program (a restarted MPI process cannot join the
    running MPI job). What only shows while the job runs (a lost host, a dead adapter or
    daemon) falls back to a relaunch then (mpilaunch/attempts/restart.py)."""
    mode, source = options.setting(args, {}, "restart_mode")
    mode = str(mode or "in-place").strip().replace("_", "-")
    if mode not in MODES:
        raise UsageError(f"{source}={mode}: give in-place or relaunch")
    if source != "default":
        return mode, source
    if not n:
        return mode, "default"
    if cfg.exec_mode:
        return "relaunch", "default with --exec: no adapter to restart the workers in place"
    prog = programs.inspect(cfg.script, cfg.module, cfg.script_args, bool(cfg.no_python),
                            os.environ.get("PATH"))
    if prog.mpi is not None:
        return "relaunch", (f"default for an MPI program ({os.path.basename(prog.mpi.path)} "
                            f"imports {prog.mpi.module}): it cannot rejoin a running MPI job")
    return mode, "default"


def _min_hosts(args: argparse.Namespace, env: Mapping[str, str], n: int) -> Optional[int]:
    raw, source = options.setting(args, {}, "min_hosts")
    if raw is None:
        # torchrun's --nnodes MIN:MAX: the hosts given, and with restarts down to MIN of them
        return torchrun.min_hosts(options.setting(args, env, "nnodes")) if n else None
    m = contract.whole(raw, source, 1)
    if not n:
        raise UsageError(f"{source} needs --max_restarts N: the hosts left run the next attempt")
    return m


def _max_no_progress(args: argparse.Namespace, n: int) -> int:
    raw, source = options.setting(args, {}, "max_no_progress_restarts")
    limit = contract.whole(raw, source, 0, 1000)
    if source != "default" and limit and not n:
        raise UsageError(f"{source} needs --max_restarts N: it limits the restarts")
    return limit if n else 0


def for_hosts(lr: Resilience, hosts: Sequence["Host"], hosts_source: str) -> Resilience:
    """``lr`` for a launch on ``hosts`` (the user's, or a discovery script's first list):
    ``--min-hosts`` checked against them, rank 0's place decided from them."""
    if lr.min_hosts is not None and lr.min_hosts > len(hosts):
        raise UsageError(f"{options.BY_DEST['min_hosts'].name}={lr.min_hosts} is more than the "
                         f"{len(hosts)} host(s) of {hosts_source}")
    return lr._replace(rank0_here=net.rank0_is_here(hosts))


_WHY_NOT = {d: "measured with mpirun and mpiexec only" for d in ("max_restarts", "stall_timeout")}


def for_backend(lr: Resilience, backend: "_Backend") -> Resilience:
    """A resilience setting the backend does not support: one line, before anything starts.
    -> ``lr``, with the span check off where the backend places no ranks by a hostfile."""
    asked = [d for d, on in (("max_restarts", lr.max_restarts), ("term_grace", lr.term_grace is not None),
                             ("stall_timeout", lr.stall_timeout)) if on]
    missing = [d for d in asked if d not in backend.resilience]
    if "term_grace" not in backend.resilience:   # the default grace: the starter's stop there
        lr = lr._replace(stop_grace=None)
    if missing:
        names = " and ".join(options.BY_DEST[d].name for d in missing)
        why = "; ".join(_WHY_NOT[d] for d in missing if d in _WHY_NOT)
        raise UsageError(f"{names}: not available with {backend.name}" + (f" ({why})" if why else "")
                         + "; use Open MPI's mpirun (--launcher mpirun) or leave it out")
    return lr._replace(span=lr.span and backend.span_check)


def resilience_on(lr: Resilience) -> bool:
    """The launcher has a part in the graceful stop, the stall watchdog or the hosts."""
    return (lr.term_grace is not None or bool(lr.stall_timeout) or lr.in_place
            or lr.min_hosts is not None)
