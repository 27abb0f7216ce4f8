"""torchrun's command line, read with its meaning where it has one here, checked against the
hosts and slots mpilaunch sees, and refused in one line where it has none (docs/FROM_TORCHRUN.md).

Kubeflow Trainer hands a torch job torchrun's flags as variables (``PET_NNODES``,
``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``; torchrun
reads every flag from ``PET_<NAME>``): they are the variables of these options, so the usual
flag > variable > default holds (mpilaunch/config/options.py).

What each flag means here (one launch starts every rank of every host, so torchrun's per-node
flags become statements about the whole job, checked before anything starts):

* ``--nproc-per-node N``: every host runs N ranks. Without a host list (this machine) or with
  ``VC_WORKER_HOSTS`` / Volcano hosts and no ``--local_worker_num`` / ``MA_NUM_GPUS``, N is
  the slots per host; otherwise every host must have exactly N slots. ``auto``, ``cpu``,
  ``gpu``: the slots mpilaunch sees, unchecked.
* ``--nnodes N`` (or ``N:N``): the number of hosts; ``MIN:MAX``: the hosts given, at least MIN
  and at most MAX of them, and with ``--max-restarts`` the job goes on down to MIN hosts after
  a host is lost (``--min-hosts MIN``); the hosts of one attempt are fixed.
* ``-np`` with either: must equal hosts x N.
* ``--standalone``: one host; a free port unless ``--master_port`` is given (torchrun's
  ``localhost:0``).
* ``--rdzv-backend``: ``static`` (torchrun's default) or ``c10d``, both meaning what
  mpilaunch does for a fixed set of hosts (rank 0's worker hosts the store at
  MASTER_ADDR:MASTER_PORT); ``etcd``, ``etcd-v2`` and others are refused.
* ``--rdzv-endpoint HOST[:PORT]``: the store's address: ``--master_addr`` / ``--master_port``
  (either given too with another value: refused). The host is then checked to be rank 0's, as
  ``--master_addr`` is (mpilaunch/config/rankcheck.py).
* ``--rdzv-id ID``: ``TORCHELASTIC_RUN_ID`` of every worker; else the launch's own id, made
  here once per launch (every attempt keeps it).
* ``--run-path``: accepted (the script runs in its own interpreter either way).
* ``--node-rank``, ``--master-addr``, ``--master-port``, ``--max-restarts``, ``--no-python``,
  ``-m`` / ``--module``, ``--log-dir``: rows of the option table with their meaning already.
* Per worker, carried to the adapters by ``--torchrun`` (rank/plan.py): ``--role`` (ROLE_NAME),
  ``--signals-to-handle`` (TORCHELASTIC_SIGNALS_TO_HANDLE), ``--redirects`` (those local ranks'
  streams stay out of the console, their logs keep them), ``--local-ranks-filter`` (the local
  ranks on the console; the logs keep every rank), ``--virtual-local-rank``. ``--tee``: every
  stream is teed here already (checked, nothing to do).
* ``--shutdown-timeout S``: ``--term-grace S``; ``--numa-binding node``: ``--bind_numa True``;
  ``--rdzv-conf``, ``--local-addr``, ``--start-method``: checked, no effect (one launch starts
  every rank at once, each an exec'd process of its adapter, at the host list's address).
* Refused in one line, why and what to use: ``--logs-specs``, ``--duplicate-stdout-filters``,
  ``--duplicate-stderr-filters``, ``--event-log-handler`` other than ``null`` (REFUSED).
* Every flag from ``PET_<NAME>`` (:func:`apply_pet`), and a walk of torch's own parser
  (TORCHRUN_DESTS, tests/launcher/config/test_torchrun_flags.py) holds the whole list.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

if TYPE_CHECKING:
    from argparse import Namespace
    from typing import Protocol, TypeVar

    from mpilaunch.config.hostfile import Host

    # config/options.py's row (Opt), which imports this module: its rows are the factory's
    Row = TypeVar("Row")

    class _Row(Protocol):
        @property
        def var(self) -> Optional[str]: ...

Setting = Tuple[Any, str]   # (value, source) of an option: config/options.py's setting()

from mpilaunch import contract
from mpilaunch.errors import UsageError

GROUP = ("torchrun", "torchrun's flags (each also read from PET_<NAME>, as torchrun reads it: "
                    "flag > variable > default)")
RDZV_BACKENDS = ("static", "c10d")
# torchrun's --nproc-per-node words that are not a number: the slots mpilaunch sees
NPROC_WORDS = ("auto", "cpu", "gpu")
# variables of rows the option table already has (torchrun reads every flag from PET_<NAME>)
PET_VARS = {"master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
            "node_rank": "PET_NODE_RANK"}


def option_rows(make: Callable[..., Row], commands: Sequence[str]) -> Tuple[Row, ...]:
    """The option table's torchrun rows, made with its row factory (no import cycle), for
    ``commands``."""
    g = GROUP[0]
    return (
        make(("--nproc-per-node", "--nproc_per_node"), "nproc_per_node",
             "ranks on each host: without a host list this machine's slots; else every host "
             "must have N slots (auto, cpu, gpu: the slots as they are)", g,
             var="PET_NPROC_PER_NODE", shown="the slots of each host", metavar="N", commands=commands),
        make(("--nnodes",), "nnodes", "number of hosts, checked against the hosts (N, or "
             "MIN:MAX: the hosts given, and with --max-restarts down to MIN, as --min-hosts)", g,
             var="PET_NNODES",
             shown="the hosts'", metavar="N", commands=commands),
        make(("--standalone",), "standalone",
             "one host, a free port unless --master_port is given", g, kind="switch",
             commands=commands),
        make(("--rdzv-id", "--rdzv_id"), "rdzv_id",
             "the job's id: TORCHELASTIC_RUN_ID of every worker", g, var="PET_RDZV_ID",
             shown="an id made per launch", metavar="ID", commands=commands),
        make(("--rdzv-backend", "--rdzv_backend"), "rdzv_backend",
             "static or c10d: rank 0's store, a fixed set of hosts (others refused)", g,
             default="static", metavar="NAME", commands=commands),
        make(("--rdzv-endpoint", "--rdzv_endpoint"), "rdzv_endpoint",
             "the store's HOST[:PORT]: --master_addr and --master_port", g,
             shown="rank 0's host", metavar="HOST[:PORT]", commands=commands),
        make(("--run-path", "--run_path"), "run_path",
             "accepted: the script runs in its own interpreter either way", g, kind="switch",
             commands=commands),
    ) + _worker_rows(make, commands)


def _worker_rows(make: Callable[..., Row], commands: Sequence[str]) -> Tuple[Row, ...]:
    """The rows of the flags config/torchworker.py reads (:data:`WORKER_DESTS`)."""
    g = GROUP[0]
    return (
        make(("--rdzv-conf", "--rdzv_conf"), "rdzv_conf",
             "KEY=VALUE,...: keys checked (its timeouts are numbers); no effect: one launch "
             "starts every rank, nothing waits for hosts to join", g, metavar="CONF",
             commands=commands),
        make(("-t", "--tee"), "tee", "0-3 or LOCAL_RANK:N,...: accepted: every worker's stdout and "
             "stderr go to its log and (the ranks the filters keep) to the console", g,
             metavar="N", commands=commands),
        make(("-r", "--redirects"), "redirects",
             "0-3 or LOCAL_RANK:N,...: the stream(s) (1 stdout, 2 stderr, 3 both) of those "
             "local ranks go to their logs only, not to the console", g, metavar="N",
             commands=commands),
        make(("--local-ranks-filter", "--local_ranks_filter"), "local_ranks_filter",
             "local ranks whose output reaches the console (on every host); every log keeps "
             "everything", g, shown="every local rank", metavar="LIST", commands=commands),
        make(("--role",), "role", "ROLE_NAME of every worker", g, default=TORCHRUN_ROLE,
             metavar="NAME", commands=commands),
        make(("--signals-to-handle", "--signals_to_handle"), "signals_to_handle",
             "TORCHELASTIC_SIGNALS_TO_HANDLE of every worker (names checked); mpilaunch's own "
             "stop signals are SIGTERM, SIGINT, SIGHUP and it passes SIGUSR1/SIGUSR2 on "
             "(docs/SIGNALS.md)", g, shown=",".join(SIGNALS_DEFAULT), metavar="LIST",
             commands=commands),
        make(("--start-method", "--start_method"), "start_method",
             "spawn, fork or forkserver: accepted; every worker is a process of its own, "
             "exec'd by its rank's adapter (what spawn gives)", g, default="spawn",
             metavar="METHOD", commands=commands),
        make(("--numa-binding", "--numa_binding"), "numa_binding",
             "node: each worker's CPUs and memory on its NUMA node (--bind_numa True); other "
             "modes refused (--bind_core, --bind_numa)", g, shown="no binding", metavar="MODE",
             commands=commands),
        make(("--virtual-local-rank", "--virtual_local_rank"), "virtual_local_rank",
             "LOCAL_RANK=0 in every worker and CUDA_VISIBLE_DEVICES its one device", g,
             kind="switch", commands=commands),
        make(("--local-addr", "--local_addr"), "local_addr",
             "accepted: every host is reached at its address in the host list", g,
             shown="the host list's", metavar="ADDR", commands=commands),
        make(("--shutdown-timeout", "--shutdown_timeout"), "shutdown_timeout",
             "seconds between the workers' SIGTERM and SIGKILL on a stop: --term-grace", g,
             shown="--term-grace's", metavar="SECONDS", commands=commands),
        make(("--event-log-handler", "--event_log_handler"), "event_log_handler",
             "null only: mpilaunch records the job's events in LOG_DIR/events.jsonl "
             "(a torch plugin handler refused)", g, default="null", metavar="NAME",
             commands=commands),
        make(("--logs-specs", "--logs_specs"), "logs_specs", REFUSED["logs_specs"], g,
             kind="hidden", commands=commands),
        make(("--duplicate-stdout-filters", "--duplicate_stdout_filters"),
             "duplicate_stdout_filters", REFUSED["duplicate_stdout_filters"], g, kind="hidden",
             commands=commands),
        make(("--duplicate-stderr-filters", "--duplicate_stderr_filters"),
             "duplicate_stderr_filters", REFUSED["duplicate_stderr_filters"], g, kind="hidden",
             commands=commands),
    )


TORCHRUN_ROLE = "default"
SIGNALS_DEFAULT = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")
# torchrun's flags that have no meaning here: the refusal of each (exit 2, nothing started)
REFUSED = {
    "logs_specs": "a torchrun plugin (an entry point of torchrun.logs_specs) mpilaunch does not "
                  "load: every worker logs to LOG_DIR/worker_<rank>.log; --log-dir, --redirects, "
                  "--tee and --local-ranks-filter choose the rest",
    "duplicate_stdout_filters": "copies matching console lines to a file of torchrun's: every "
                                "worker's whole output is in LOG_DIR/worker_<rank>.log already; "
                                "grep it",
    "duplicate_stderr_filters": "copies matching console lines to a file of torchrun's: every "
                                "worker's whole output is in LOG_DIR/worker_<rank>.log already; "
                                "grep it",
}
# every torchrun flag, by torch's dest: the dest of its row in the option table (its meaning
# there, or its refusal: REFUSED); None: decided by a row of another part (--monitor-interval:
# the monitor's, which reads its own variable); tests/launcher/config/test_torchrun_flags.py walks
# torch's own parser against it, so a new torchrun flag fails until it is decided
TORCHRUN_DESTS = {
    "nnodes": "nnodes", "nproc_per_node": "nproc_per_node", "rdzv_backend": "rdzv_backend",
    "rdzv_endpoint": "rdzv_endpoint", "rdzv_id": "rdzv_id", "rdzv_conf": "rdzv_conf",
    "standalone": "standalone", "max_restarts": "max_restarts",
    "monitor_interval": None, "start_method": "start_method",
    "event_log_handler": "event_log_handler", "role": "role", "module": "module",
    "no_python": "no_python", "run_path": "run_path", "log_dir": "log_dir",
    "redirects": "redirects", "tee": "tee", "local_ranks_filter": "local_ranks_filter",
    "duplicate_stdout_filters": "duplicate_stdout_filters",
    "duplicate_stderr_filters": "duplicate_stderr_filters", "node_rank": "node_rank",
    "master_addr": "master_addr", "master_port": "master_port", "local_addr": "local_addr",
    "logs_specs": "logs_specs", "numa_binding": "numa_binding",
    "signals_to_handle": "signals_to_handle", "shutdown_timeout": "shutdown_timeout",
    "virtual_local_rank": "virtual_local_rank",
}
# switches torchrun reads from PET_<NAME> as 0/1
PET_SWITCHES = ("standalone", "module", "no_python", "run_path", "virtual_local_rank")


def pet_name(dest: str) -> str:
    """The variable torchrun reads a flag from: ``PET_`` + its dest in capitals."""
    return "PET_" + dest.upper()


def apply_pet(args: Namespace, env: Mapping[str, str], rows: Mapping[str, _Row]) -> List[Tuple[str, str]]:
    """torchrun reads every flag from ``PET_<NAME>`` (flag > variable > default): each flag not
    given whose row has no variable of its own (``rows``: dest -> Opt) takes its variable, in
    ``args`` (a switch: 1/0, as torchrun reads it). -> the (variable, dest) pairs taken."""
    taken: List[Tuple[str, str]] = []
    for torch_dest, dest in TORCHRUN_DESTS.items():
        name = pet_name(torch_dest)
        if dest is None or name not in env or not hasattr(args, dest):
            continue
        row = rows.get(dest)
        if row is None or row.var:
            continue
        raw = str(env[name]).strip()
        if torch_dest in PET_SWITCHES:
            if getattr(args, dest, False) or not raw:
                continue
            if raw not in ("0", "1"):
                raise UsageError(f"{name}={raw!r}: give 1 or 0")
            if raw == "1":
                if torch_dest == "module":   # torchrun's switch: the script is a module name
                    if getattr(args, "module", None) is None and getattr(args, "script", None):
                        args.module, args.script = args.script, None
                else:
                    setattr(args, dest, True)
                taken.append((name, dest))
        elif getattr(args, dest, None) is None and raw:
            setattr(args, dest, raw)
            taken.append((name, dest))
    return taken


# the flags config/torchworker.py reads: a launch that gives none of them never loads it
WORKER_DESTS = ("rdzv_conf", "tee", "redirects", "local_ranks_filter", "role", "signals_to_handle",
                "start_method", "numa_binding", "virtual_local_rank", "local_addr",
                "shutdown_timeout", "event_log_handler", "logs_specs", "duplicate_stdout_filters",
                "duplicate_stderr_filters")


def _worker_flags(args: Namespace) -> bool:
    return any(getattr(args, d, None) not in (None, False) for d in WORKER_DESTS)


def prepare(args: Namespace, env: Mapping[str, str], rows: Mapping[str, _Row]) -> None:
    """Before the launch configuration is built from ``args``: torchrun's variables taken
    (:func:`apply_pet`), then the per-worker and meaningless flags checked
    (config/torchworker.py): refusals, ``--shutdown-timeout`` as ``--term-grace``,
    ``--numa-binding node`` as ``--bind_numa True``."""
    apply_pet(args, env, rows)
    if not _worker_flags(args):
        return
    from mpilaunch.config import torchworker

    torchworker.refuse(args, REFUSED)
    torchworker.term_grace(args)
    bind = torchworker.numa_binding(getattr(args, "numa_binding", None))
    if bind is not None and getattr(args, "bind_numa", None) is None:
        args.bind_numa = bind


def rank_spec(args: Namespace, env: Mapping[str, str]) -> Optional[str]:
    """The adapters' ``--torchrun`` (config/torchworker.py rank_spec), or None."""
    if not _worker_flags(args):
        return None
    from mpilaunch.config import torchworker

    return torchworker.rank_spec(args, env, TORCHRUN_ROLE)


def _value(setting: Setting) -> Tuple[Optional[str], str]:
    value, source = setting
    return (None if value is None else str(value).strip()), source


def nproc(setting: Setting) -> Optional[int]:
    """``--nproc-per-node`` as a number, or None (not given, or auto/cpu/gpu)."""
    value, source = _value(setting)
    if value is None or value.lower() in NPROC_WORDS:
        return None
    return contract.whole(value, source, 1, fix="give a number of ranks per host, or auto")


def node_range(setting: Setting) -> Optional[Tuple[int, int]]:
    """``--nnodes N`` or ``MIN:MAX`` -> (MIN, MAX), or None when not given."""
    value, source = _value(setting)
    if value is None:
        return None
    low, colon, high = value.partition(":")
    lo = contract.whole(low, source, 1, fix="give the number of hosts, such as 2 or 1:4")
    hi = contract.whole(high, source, 1, fix="give the number of hosts, such as 2 or 1:4") if colon else lo
    if hi < lo:
        raise UsageError(f"{source}={value!r}: MIN is above MAX; give MIN:MAX such as 1:4")
    return lo, hi


def nnodes(setting: Setting) -> Optional[int]:
    """``--nnodes N`` (or ``N:N``) -> N; a range MIN:MAX -> None (checked by check_hosts)."""
    span = node_range(setting)
    return None if span is None or span[0] != span[1] else span[0]


def min_hosts(setting: Setting) -> Optional[int]:
    """MIN of ``--nnodes MIN:MAX`` with MIN < MAX (the job goes on down to MIN hosts, as
    ``--min-hosts`` does), else None."""
    span = node_range(setting)
    return span[0] if span is not None and span[0] < span[1] else None


def endpoint(value: Optional[str], source: str = "--rdzv-endpoint") -> Tuple[Optional[str], Optional[int]]:
    """``HOST[:PORT]`` (``[v6]:PORT``) -> (host, port or None)."""
    if value is None or not value.strip():
        return None, None
    text = value.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise UsageError(f"{source}={value!r}: give HOST[:PORT] ([ADDR]:PORT for IPv6)")
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, None
    if not host:
        raise UsageError(f"{source}={value!r}: no host; give HOST[:PORT]")
    return host, None if port is None else contract.master_port(port, source)


def rdzv_backend(value: Optional[str]) -> None:
    if value is None or value.strip().lower() in RDZV_BACKENDS:
        return
    raise UsageError(f"--rdzv-backend={value!r}: mpilaunch's ranks meet at rank 0's store, "
                     "a fixed set of hosts (what static and c10d give); give static or c10d")


def check_hosts(nproc_setting: Setting, nnodes_setting: Setting, np_setting: Setting,
                hosts: Sequence[Host], hosts_source: str, standalone: bool) -> None:
    """The torchrun flags against the hosts and slots mpilaunch sees: a mismatch is one line
    naming both."""
    per_node, source = nproc(nproc_setting), nproc_setting[1]
    n = nnodes(nnodes_setting)
    count = len(hosts)
    if standalone and count != 1:
        raise UsageError(f"--standalone runs on one host, but {hosts_source} lists {count} "
                         "hosts; leave --standalone out")
    if standalone and n is not None and n != 1:
        raise UsageError(f"--standalone runs on one host, but {nnodes_setting[1]}={n}")
    span = node_range(nnodes_setting)
    if span is not None and not span[0] <= count <= span[1]:
        where = (f"{hosts_source} lists {count} host(s)" if hosts_source != "localhost" else
                 "no host list was given (this machine only: -H, --hostfile or an allocation)")
        want = str(span[0]) if n is not None else f"{span[0]}:{span[1]} (MIN:MAX hosts)"
        raise UsageError(f"{nnodes_setting[1]}={want} but {where}; make them agree")
    if per_node is not None:
        odd = next((h for h in hosts if h.slots != per_node), None)
        if odd is not None:
            raise UsageError(f"{source}={per_node} but {hosts_source} gives {odd.name} "
                             f"{odd.slots} slot(s); make them agree (or leave {source} out)")
        np_value, np_source = np_setting
        if np_value is not None:
            np = contract.whole(np_value, np_source, 1)
            if np != per_node * count:
                raise UsageError(f"{np_source}={np} but {source}={per_node} on {count} host(s) "
                                 f"makes {per_node * count} ranks; make them agree")


def rendezvous(args: Namespace, addr_setting: Setting, port_setting: Setting
               ) -> Tuple[Optional[str], Setting]:
    """(master_addr, (master_port, its source)) with ``--rdzv-endpoint`` and ``--standalone``
    applied; ``--rdzv-backend`` checked. The settings: (value, source) of each option."""
    rdzv_backend(getattr(args, "rdzv_backend", None))
    host, port = endpoint(getattr(args, "rdzv_endpoint", None))
    master_addr, addr_source = addr_setting
    if host is not None:
        if master_addr and master_addr.strip() != host:
            raise UsageError(f"--rdzv-endpoint={args.rdzv_endpoint!r} and {addr_source}="
                             f"{master_addr!r} disagree; give one")
        master_addr = host
    if port is not None:
        value, source = port_setting
        if source != "default" and contract.master_port(value, source) != port:
            raise UsageError(f"--rdzv-endpoint={args.rdzv_endpoint!r} and {source}={value} "
                             "disagree; give one")
        port_setting = (str(port), "--rdzv-endpoint")
    if getattr(args, "standalone", False) and port_setting[1] == "default":
        port_setting = ("0", "--standalone")
    return master_addr, port_setting


def run_id(setting: Setting) -> str:
    """``TORCHELASTIC_RUN_ID``: ``--rdzv-id`` / ``PET_RDZV_ID``, else an id made now, once per
    launch (every attempt and rank gets this one)."""
    value, _ = _value(setting)
    return value or f"mpilaunch-{os.urandom(6).hex()}"
