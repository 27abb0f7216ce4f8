"""What this rank starts, decided from values only: the rank side's plan. Pure.

Inputs are values: the validated :class:`~mpilaunch.rank.options.Options`, the
:class:`~mpilaunch.rank.identity.RankInfo`, the agreement's scheduler address and port, the
user's environment, the worker argv, the host name, and what ``__main__`` looked up for it
(this host's ``{ip}``, the interface towards rank 0, the CPUs and NUMA nodes). Outputs: the
:class:`ChildSpec` list the supervisor starts (:func:`children`), or for ``--exec`` the
:class:`ExecPlan`. No processes, sockets or files here; ``__main__`` does all of that.

Decisions made here (and only here):

* rank 0 runs the scheduler unless ``--no-scheduler`` (the launcher sends it for every job
  that is not a MindSpore one); it gets ``scheduler.log``, never the console tail, never
  stdin, and never the MPI identity (``OMPI_*``, ``PMIX_*``, ``PMI_*``, Hydra's
  ``MPI_LOCALRANKID``/``MPI_LOCALNRANKS``): a second process calling MPI_Init as rank 0 breaks
  PMIx for the whole job; the worker inherits the adapter's stdin (rank 0's is mpirun's);
* the worker's log is ``--worker-log-name`` with ``{rank}``, ``{hostname}``, ``{ip}`` filled;
  its output is relayed with ``[rank<R>] `` when ``--tail-worker-log`` selects the rank;
* ``GLOO_SOCKET_IFNAME`` (worker only) = the interface routing to rank 0 when the ranks span
  hosts and the user did not set it: gloo picks its interface by resolving this host's name
  and falls back to loopback when the name does not resolve, and then no rank reaches another;
* ``--bind-core`` CPUs (:func:`mpilaunch.rank.binding.affinity.plan_cpus`);
* ``--bind-numa``: the child's argv goes behind rank/binding/numabind.py (:func:`numa_argv`), which
  binds CPUs and memory in the child itself, then execs it;
* ``--exec``: Python scripts with our own interpreter run under ``python -m mpi4py``;
* the worker of a job without MindSpore's scheduler (not ``--exec``) gets torchrun's variables
  (rank/frameworkenv.py), its ``TORCHELASTIC_ERROR_FILE`` beside its log
  (``contract.error_file_path``).
"""
from __future__ import annotations

import os
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

    from mpilaunch.rank.identity import RankInfo
    from mpilaunch.rank.options import Options, Torchrun

    # The checker's view of the records below; at run time they are namedtuples (a test holds
    # the two to the same fields).
    class _ChildSpec(NamedTuple):
        role: str; argv: List[str]; env: Dict[str, str]; log_path: str   # noqa: E702
        tail_prefix: Optional[bytes] = None
        cpus: Optional[List[int]] = None
        inherit_stdin: bool = False
        pass_fds: Tuple[int, ...] = ()
        hidden: int = 0

    class _ExecPlan(NamedTuple):
        argv: List[str]; env: Dict[str, str]; cpus: Optional[List[int]]   # noqa: E702
else:
    _ChildSpec = namedtuple("ChildSpec", "role argv env log_path tail_prefix cpus inherit_stdin "
                            "pass_fds hidden", defaults=(None, None, False, (), 0))
    _ExecPlan = namedtuple("ExecPlan", "argv env cpus")

from mpilaunch import contract
from mpilaunch.errors import UsageError
from mpilaunch.rank import logs   # affinity: imported where --bind-core/--bind-numa is on
from mpilaunch.rank.frameworkenv import FrameworkOpts, device_id, framework_env


class ChildSpec(_ChildSpec):
    """What to start: role "worker" | "scheduler"; env: the complete environment;
    tail_prefix: bytes -> relay the output to stdout with this prefix on each line;
    hidden: with a tail_prefix, the stream kept off the console (1 stdout, 2 stderr; torchrun's
    --redirects): it goes to the log alone;
    cpus: affinity list (None = do not bind); inherit_stdin: else /dev/null;
    pass_fds: descriptors the child keeps open (the starter's, identity.starter_fds)."""

    __slots__ = ()


class ExecPlan(_ExecPlan):
    """``--exec``: the argv and environment to exec, and the CPUs to bind first (or None)."""

    __slots__ = ()


MPI_IDENTITY_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "PRTE_")
MPI_IDENTITY_NAMES = ("MPI_LOCALRANKID", "MPI_LOCALNRANKS")


def without_mpi_identity(env: Mapping[str, str]) -> Dict[str, str]:
    """``env`` minus what makes a process an MPI rank (the scheduler copy of the script)."""
    return {k: v for k, v in env.items()
            if not k.startswith(MPI_IDENTITY_PREFIXES) and k not in MPI_IDENTITY_NAMES}


def framework_opts(opts: Options, error_file: Optional[str] = None) -> FrameworkOpts:
    """The framework options of ``opts``; torchrun's variables for a supervised worker of a
    job without MindSpore's scheduler (rank/frameworkenv.py), ``error_file`` its
    ``TORCHELASTIC_ERROR_FILE``."""
    lr = opts.resilience
    return FrameworkOpts(opts.cluster_time_out, opts.visible_devices, opts.sim_level,
                         opts.sim_rank_id, opts.sim_world, opts.rank_table_file,
                         torch=bool(opts.no_scheduler and not opts.exec_), run_id=opts.run_id,
                         restart_count=lr.restart_count if lr is not None else None,
                         max_restarts=lr.max_restarts if lr is not None else None,
                         error_file=error_file)


def numa_argv(opts: Options, argv: List[str], role: str, info: RankInfo, device: str, keep_cpus: bool) -> List[str]:
    """``argv`` behind rank/binding/numabind.py when ``--bind-numa`` binds ``role`` (the scheduler
    only by its own key, as in msrun), else ``argv``."""
    if opts.numa is None:
        return argv
    from mpilaunch.rank.binding import affinity

    spec = affinity.parse_bind_numa(opts.numa)
    if spec is None or (role == "scheduler" and (spec == affinity.AUTO or "scheduler" not in spec)):
        return argv
    import sys

    from mpilaunch.rank.binding import numabind

    return numabind.prefix(sys.executable, opts.numa, role, *info.local(), device,
                           keep_cpus) + list(argv)


def check(opts: Options, info: RankInfo, user_env: Mapping[str, str]) -> None:
    """What needs the rank's identity to be checked, before anything starts."""
    if opts.tail and info.size is not None:
        bad = sorted(r for r in opts.tail if r >= info.size)
        if bad:
            raise UsageError(f"--tail-worker-log: rank {bad[0]} does not exist "
                             f"(the job has {info.size} ranks)")
    if info.complete:
        device_id(info, framework_opts(opts), user_env)
    if not opts.exec_:   # distinct per rank: the same rule the launcher applied (rankcheck.py)
        from mpilaunch.rank import logs

        logs.check_log_name(opts.worker_log_name, info.size)


def needs_local_ip(opts: Options) -> bool:
    """Whether :func:`children` needs this host's address (for ``{ip}`` in the log name)."""
    return "{ip}" in opts.worker_log_name


def needs_gloo_ifname(info: RankInfo, user_env: Mapping[str, str]) -> bool:
    """Whether the worker gets ``GLOO_SOCKET_IFNAME`` (ranks on several hosts, not set)."""
    return not info.single_node and not user_env.get("GLOO_SOCKET_IFNAME")


def children(opts: Options, info: RankInfo, sched_addr: str, sched_port: int, user_env: Mapping[str, str],
             argv: List[str], hostname: str, ip: str = "", gloo_ifname: Optional[str] = None,
             cpus: Sequence[int] = (), numa_nodes: Sequence[Sequence[int]] = ()) -> List[ChildSpec]:
    """The children of this rank: [scheduler (rank 0)], worker. ``info`` is the agreed one
    (complete, node index known); ``cpus``/``numa_nodes`` matter only with --bind-core."""
    worker_log = os.path.join(opts.log_dir, logs.worker_log_name(
        opts.worker_log_name, info.rank, hostname, ip))
    # absolute: the worker may change its directory before torch's @record writes the file
    fw = framework_opts(opts, contract.error_file_path(
        os.path.abspath(os.path.dirname(worker_log)), info.rank))
    worker_env = framework_env(info, sched_addr, sched_port, fw, user_env)
    if gloo_ifname and needs_gloo_ifname(info, user_env):
        worker_env["GLOO_SOCKET_IFNAME"] = gloo_ifname
    local_rank, local_size = info.local()   # framework_env checked it is known
    tr = opts.torchrun
    hidden = 0 if tr is None else tr.hidden(local_rank)
    if tr is not None and "ROLE_NAME" in worker_env:   # a torch worker (torchrun's variables)
        torchrun_env(tr, worker_env, local_rank)
    worker_cpus = sched_cpus = None
    if opts.bind is not None:
        from mpilaunch.rank.binding import affinity

        worker_cpus, sched_cpus = affinity.plan_cpus(
            opts.bind, cpus, numa_nodes, local_rank, local_size,
            info.node_index == 0 and not opts.no_scheduler, worker_env["DEVICE_ID"])
    specs = []
    device = worker_env["DEVICE_ID"]
    if info.rank == 0 and not opts.no_scheduler:
        specs.append(ChildSpec(
            role="scheduler", argv=numa_argv(opts, argv, "scheduler", info, device, bool(sched_cpus)),
            env=without_mpi_identity(
                framework_env(info, sched_addr, sched_port, fw, user_env, role="scheduler")),
            log_path=os.path.join(opts.log_dir, logs.SCHEDULER_LOG_NAME), cpus=sched_cpus))
    specs.append(ChildSpec(
        role="worker", argv=numa_argv(opts, argv, "worker", info, device, bool(worker_cpus)),
        env=worker_env, log_path=worker_log,
        tail_prefix=(f"[rank{info.rank}] ".encode()
                     if logs.is_tailed(opts.tail, info.rank) and hidden != 3 else None),
        cpus=worker_cpus, inherit_stdin=True, hidden=hidden if hidden in (1, 2) else 0))
    return specs


def torchrun_env(tr: Torchrun, env: Dict[str, str], local_rank: int) -> None:
    """torchrun's per-worker flags in a torch worker's environment (``--torchrun``): --role,
    --signals-to-handle, --virtual-local-rank (LOCAL_RANK 0, CUDA_VISIBLE_DEVICES the worker's
    one device: the local rank's entry of the list it had, else its DEVICE_ID)."""
    if tr.role is not None:
        env["ROLE_NAME"] = tr.role
    if tr.signals is not None:
        env["TORCHELASTIC_SIGNALS_TO_HANDLE"] = tr.signals
    if tr.vlr:
        listed = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = (listed[local_rank] if local_rank < len(listed)
                                       else env.get("DEVICE_ID", str(local_rank)))
        env["LOCAL_RANK"] = "0"


def exec_check(opts: Options, info: RankInfo) -> None:
    """``--exec``: no MPI, so only what the environment alone tells is available. Single
    node -> node index 0 and ``127.0.0.1``; Slurm -> node index from ``SLURM_NODEID``,
    ``--master-addr`` required; Open MPI / Hydra across nodes -> ``--master-addr`` required
    and ``NODE_RANK`` / ``GROUP_RANK`` are left unset. ``--master-port 0`` and a PMIx-only
    starter are usage errors."""
    if not info.complete:
        raise UsageError(f"--exec: the starter ({info.starter}) does not give the world size "
                         f"and local rank; run without --exec")
    if opts.master_port == 0:
        raise UsageError("--exec cannot use --master-port 0 here (picking a port needs the MPI "
                         "agreement; the launcher picks one when rank 0 runs on its host); "
                         "give a port")
    if not info.single_node and not opts.master_addr:
        raise UsageError("--exec with ranks on several hosts needs --master-addr (rank 0's "
                         "address cannot be learnt without MPI)")


def exec_plan(opts: Options, info: RankInfo, sched_addr: str, user_env: Mapping[str, str], argv: List[str],
              own_python: bool, cpus: Sequence[int] = (),
              numa_nodes: Sequence[Sequence[int]] = ()) -> ExecPlan:
    """``--exec``: what to exec. ``own_python``: ``argv[0]`` is the adapter's interpreter
    (known to have mpi4py)."""
    env = framework_env(info, sched_addr, opts.master_port, framework_opts(opts), user_env)
    bound = None
    if opts.bind is not None:
        from mpilaunch.rank.binding import affinity

        bound, _ = affinity.plan_cpus(opts.bind, cpus, numa_nodes, *info.local(), False,
                                      env["DEVICE_ID"])
    argv = list(argv)
    if not opts.no_python and own_python:
        # Run the MPI program under mpi4py's runner: an exception or a non-zero sys.exit then
        # calls MPI_Abort, instead of waiting in MPI_Finalize for ranks that will never come
        # (62 s measured).
        argv = [argv[0], "-m", "mpi4py"] + argv[1:]
    argv = numa_argv(opts, argv, "worker", info, env["DEVICE_ID"], bool(bound))
    return ExecPlan(argv, env, bound or None)
