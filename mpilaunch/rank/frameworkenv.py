"""The environment a worker (or the scheduler) gets: MindSpore and PyTorch variables. Pure.

:func:`framework_env` returns the *complete* child environment: the user's environment
with ours laid over it.

Rule for variables the user already set (in the launching shell, a tune file, ``-x``):

* **Identity and rendezvous variables are always ours.** A value inherited from the
  launching shell is the same on every rank and therefore wrong on all but one:
  ``MS_ROLE``, ``MS_WORKER_NUM``, ``MS_NODE_ID``, ``MS_SCHED_HOST``, ``MS_SCHED_PORT``,
  ``RANK_ID``, ``RANK_SIZE``, ``DEVICE_ID``, ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
  ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``NODE_RANK``.
  The address and port come from ``--master-addr`` / ``--master-port`` (agreed by rank 0).
  ``GROUP_RANK`` / ``NODE_RANK`` are removed when the node index is unknown (``--exec``
  across nodes under Open MPI), rather than left stale.
* ``NCCL_SOCKET_FAMILY=AF_INET`` (the ModelArts default ``-x`` set) becomes ``AF_INET6`` when
  the scheduler address is IPv6: on an IPv6-only cluster IPv4 sockets find no interface.
* **Tuning variables the user set are respected.** ``MS_TOPO_TIMEOUT``: the
  ``--cluster-time-out`` flag if given, else the user's value, else 600 (msrun's
  ``cluster_time_out`` default). ``MS_ENABLE_RECOVERY``, ``MS_RECOVERY_PATH`` and every
  other variable pass through untouched.
* ``DEVICE_ID`` = the local rank mapped through the first device list that is set:
  ``--visible-devices``, then ``ASCEND_RT_VISIBLE_DEVICES``, then ``CUDA_VISIBLE_DEVICES``
  (``DEVICE_ID = list[local_rank]``); an empty variable counts as unset (a CPU job with
  ``CUDA_VISIBLE_DEVICES=""`` still runs). A list shorter than the node's local size is a
  :class:`UsageError` naming where the list came from.

**A torch worker's environment is a superset of torchrun's** (``FrameworkOpts.torch``: a
supervised worker of a job without MindSpore's scheduler; never ``--exec`` programs, MindSpore
jobs or the scheduler). What torch 2.13.0's local agent gives each worker
(torch/distributed/elastic/agent/server/local_elastic_agent.py, ``_start_workers``) and
torch/distributed/run.py adds:

* ``ROLE_RANK`` = ``RANK``, ``ROLE_WORLD_SIZE`` = ``WORLD_SIZE``, ``ROLE_NAME=default``
  (one role, torchrun's default ``--role``); ``GROUP_WORLD_SIZE`` = the number of nodes
  (removed when unknown, as ``GROUP_RANK``);
* ``TORCHELASTIC_RESTART_COUNT`` / ``TORCHELASTIC_MAX_RESTARTS``: the attempt (relaunched or
  restarted in place) and ``--max_restarts``, 0 and 0 without restarts;
* ``TORCHELASTIC_RUN_ID``: the job's id (``--run-id``, the same on every rank and attempt),
  else ``none`` (torchrun's default ``--rdzv-id``). Its presence is what
  ``torch.distributed.is_torchelastic_launched()`` tests, and Lightning picks its
  ``TorchElasticEnvironment`` first by it (before SLURM, LSF, MPI);
* ``TORCH_NCCL_ASYNC_ERROR_HANDLING``: the user's value, else ``1``; and
  ``TORCHELASTIC_SIGNALS_TO_HANDLE``: the user's, else torchrun's default list;
* ``TORCHELASTIC_ERROR_FILE``: where torch's ``@record`` writes the exception
  (``contract.error_file_path``: beside the worker's log of this attempt);
* ``OMP_NUM_THREADS=1`` when the user did not set it and more than one rank runs on the node.

``TORCHELASTIC_USE_AGENT_STORE`` / ``TORCH_NPU_ELASTIC_USE_AGENT_STORE`` are never given (and
an inherited one is removed from every worker): no agent hosts a store here, rank 0's worker
hosts it, and torch would otherwise connect to a store nobody started.

The scheduler's environment is rank 0's worker environment with ``MS_ROLE=MS_SCHED`` and
without ``MS_NODE_ID`` (a scheduler must not claim worker 0's node id). ``DEVICE_ID``,
``RANK_ID`` etc. are kept so that script code before ``init()``, which runs in the
scheduler too, finds what it reads.
"""
from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False  # no typing at run time (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from typing import Dict, Mapping, Optional, Tuple

from mpilaunch.errors import UsageError
from mpilaunch.rank.identity import RankInfo

DEFAULT_TOPO_TIMEOUT = 600

VISIBLE_DEVICE_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# torchrun's defaults: --role, --rdzv-id, and the OMP_NUM_THREADS it sets (torch/distributed/run.py)
TORCHRUN_ROLE, TORCHRUN_RUN_ID, OMP_DEFAULT = "default", "none", "1"
TORCHRUN_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"   # its --signals-to-handle
# an agent's store: never ours (rank 0's worker hosts the store)
AGENT_STORE_VARS = ("TORCHELASTIC_USE_AGENT_STORE", "TORCH_NPU_ELASTIC_USE_AGENT_STORE")


class FrameworkOpts(namedtuple("FrameworkOpts", "cluster_time_out visible_devices sim_level "
                               "sim_rank_id sim_world rank_table_file torch run_id "
                               "restart_count max_restarts error_file",
                               defaults=(None, None, None, None, None, None, None, None, None,
                                         None, None))):
    """cluster_time_out: --cluster-time-out (None = not given); visible_devices: tuple of
    --visible-devices entries (None = not given); sim_level, sim_rank_id, sim_world:
    MindSpore's DryRun (--sim-level ...); rank_table_file: RANK_TABLE_FILE; torch: the worker
    gets torchrun's variables (run_id, restart_count, max_restarts, error_file: theirs)."""

    __slots__ = ()


def parse_devices(text: str, source: str = "--visible-devices") -> Tuple[str, ...]:
    """A device list (``--visible-devices``, ``*_VISIBLE_DEVICES``) -> its entries. The one
    rule, applied by the launcher before anything starts (rankcheck.py) and by every rank:
    an empty entry (``""``, ``,``, ``0,,1``) is a UsageError naming ``source``."""
    entries = tuple(d.strip() for d in str(text).split(","))
    if not all(entries):
        why = "is empty" if not str(text).strip() else "has an empty entry"
        raise UsageError(f"{source}={text!r}: {why}; give a comma list of device ids, one per "
                         "local rank, such as 0,1,2,3")
    return entries


def device_list(opts: FrameworkOpts, user_env: Mapping[str, str]) -> Tuple[Optional[str], Optional[list]]:
    """(source name, device list) from the flag or the first non-empty env variable."""
    if opts.visible_devices is not None:
        return "--visible-devices", list(parse_devices(",".join(opts.visible_devices)))
    for name in VISIBLE_DEVICE_VARS:
        raw = user_env.get(name, "")
        if raw.strip():
            return name, list(parse_devices(raw, name))
    return None, None


def device_id(info: RankInfo, opts: FrameworkOpts, user_env: Mapping[str, str]) -> str:
    if info.local_rank is None or info.local_size is None:   # callers hold a complete RankInfo
        raise ValueError("device_id needs a complete RankInfo (local rank and size known)")
    source, devices = device_list(opts, user_env)
    if devices is None:
        return str(info.local_rank)
    if len(devices) < info.local_size:
        raise UsageError(
            f"{source}={','.join(devices)!r} lists {len(devices)} device(s) but "
            f"{info.local_size} ranks run on this node")
    return devices[info.local_rank]


def framework_env(info: RankInfo, sched_addr: str, sched_port: int, opts: FrameworkOpts,
                  user_env: Mapping[str, str], role: str = "worker") -> Dict[str, str]:
    """The full environment for the worker (``role="worker"``) or the scheduler."""
    if role not in ("worker", "scheduler"):
        raise ValueError(f"role must be worker or scheduler, not {role!r}")
    if not info.complete:
        raise ValueError("framework_env needs a complete RankInfo (size and local rank known)")
    env = dict(user_env)
    rank, size = str(info.rank), str(info.size)
    if opts.cluster_time_out is not None:
        topo = str(opts.cluster_time_out)
    else:
        topo = user_env.get("MS_TOPO_TIMEOUT") or str(DEFAULT_TOPO_TIMEOUT)
    ours = {
        # MindSpore dynamic cluster
        "MS_ROLE": "MS_WORKER" if role == "worker" else "MS_SCHED",
        "MS_WORKER_NUM": size,
        "MS_SCHED_HOST": sched_addr,
        "MS_SCHED_PORT": str(sched_port),
        "MS_NODE_ID": rank,
        "MS_TOPO_TIMEOUT": topo,
        "RANK_ID": rank,
        "RANK_SIZE": size,
        "DEVICE_ID": device_id(info, opts, user_env),
        # PyTorch (torchrun's names)
        "MASTER_ADDR": sched_addr,
        "MASTER_PORT": str(sched_port),
        "RANK": rank,
        "WORLD_SIZE": size,
        "LOCAL_RANK": str(info.local_rank),
        "LOCAL_WORLD_SIZE": str(info.local_size),
    }
    sim = opts.sim_level if opts.sim_level is not None else user_env.get("MS_SIMULATION_LEVEL")
    if sim is not None and str(sim).strip():
        _simulation(ours, env, str(sim).strip(), opts)
    if opts.rank_table_file:
        ours["RANK_TABLE_FILE"] = opts.rank_table_file
    if ":" in sched_addr and user_env.get("NCCL_SOCKET_FAMILY", "").strip() == "AF_INET":
        # the ModelArts default -x set forces IPv4 sockets on NCCL; with an IPv6 scheduler
        # (an IPv6-only cluster) NCCL would then find no interface: its IPv6 sockets instead
        ours["NCCL_SOCKET_FAMILY"] = "AF_INET6"
    env.update(ours)
    if info.node_index is not None:
        env["GROUP_RANK"] = env["NODE_RANK"] = str(info.node_index)
    else:
        env.pop("GROUP_RANK", None)
        env.pop("NODE_RANK", None)
    for name in AGENT_STORE_VARS:
        env.pop(name, None)
    if role == "scheduler":
        env.pop("MS_NODE_ID", None)
    elif opts.torch:
        env.update(torchrun_env(info, opts, user_env))
        if info.num_nodes is None:
            env.pop("GROUP_WORLD_SIZE", None)
    return env


def _simulation(ours: Dict[str, str], env: Dict[str, str], level: str, opts: FrameworkOpts) -> None:
    """As msrun 2.x in a simulation: MS_SIMULATION_LEVEL, and none of the dynamic cluster's
    variables (no scheduler runs: DryRun compiles one rank alone). Amends ``ours`` (what the
    launcher sets) and ``env`` (the user's, which it drops those from)."""
    for name in ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_TOPO_TIMEOUT"):
        ours.pop(name)
        if name != "MS_TOPO_TIMEOUT":
            env.pop(name, None)
    ours["MS_SIMULATION_LEVEL"] = level
    if opts.sim_rank_id is not None:
        ours["RANK_ID"] = str(opts.sim_rank_id)
        ours.pop("MS_NODE_ID")
        env.pop("MS_NODE_ID", None)
    if opts.sim_world is not None:
        ours["RANK_SIZE"] = ours["MS_WORKER_NUM"] = str(opts.sim_world)


def torchrun_env(info: RankInfo, opts: FrameworkOpts, user_env: Mapping[str, str]) -> Dict[str, str]:
    """What torchrun gives a worker beyond the variables every rank gets (module doc)."""
    local_size = info.local_size
    if local_size is None:   # framework_env checked it: a complete RankInfo
        raise ValueError("torchrun_env needs a complete RankInfo (local size known)")
    ours = {
        "ROLE_RANK": str(info.rank),
        "ROLE_NAME": TORCHRUN_ROLE,
        "ROLE_WORLD_SIZE": str(info.size),
        "TORCHELASTIC_RESTART_COUNT": str(opts.restart_count or 0),
        "TORCHELASTIC_MAX_RESTARTS": str(opts.max_restarts or 0),
        "TORCHELASTIC_RUN_ID": opts.run_id or TORCHRUN_RUN_ID,
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": user_env.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": user_env.get("TORCHELASTIC_SIGNALS_TO_HANDLE",
                                                       TORCHRUN_SIGNALS),
    }
    if info.num_nodes is not None:
        ours["GROUP_WORLD_SIZE"] = str(info.num_nodes)
    if opts.error_file:
        ours["TORCHELASTIC_ERROR_FILE"] = opts.error_file
    if omp_threads(user_env, local_size) is not None:
        ours["OMP_NUM_THREADS"] = OMP_DEFAULT
    return ours


def omp_threads(user_env: Mapping[str, str], per_node: int) -> Optional[str]:
    """torchrun's rule (torch/distributed/run.py): ``OMP_NUM_THREADS=1`` for every worker when
    it is not set and more than one process runs per node; else None (the user's stands)."""
    if "OMP_NUM_THREADS" in user_env or per_node <= 1:
        return None
    return OMP_DEFAULT



OMP_NOTE = ("mpilaunch: OMP_NUM_THREADS=1 for every worker (not set, and more than one rank per "
            "host), as torchrun does; set OMP_NUM_THREADS to choose\n")


def omp_note(user_env: Mapping[str, str], worker_env: Mapping[str, str]) -> Optional[str]:
    """torchrun's start-up warning when :func:`omp_threads` set the worker's OMP_NUM_THREADS
    (rank 0's adapter says it once, on the launcher's console), else None."""
    if "OMP_NUM_THREADS" in user_env or worker_env.get("OMP_NUM_THREADS") != OMP_DEFAULT:
        return None
    return OMP_NOTE
