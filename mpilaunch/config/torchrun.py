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
* ``--nnodes N`` (or ``N:N``): the number of hosts; ``MIN:MAX`` with MIN < MAX (elastic
  membership) is refused: the hosts of an attempt are fixed (``--min-hosts`` shrinks between
  attempts).
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
  ``-m``: rows of the option table with their meaning already.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

from mpilaunch import contract
from mpilaunch.errors import UsageError

GROUP = ("torchrun", "torchrun's flags (Kubeflow Trainer's PET_* variables in brackets)")
RDZV_BACKENDS = ("static", "c10d")
# torchrun's --nproc-per-node words that are not a number: the slots mpilaunch sees
NPROC_WORDS = ("auto", "cpu", "gpu")
# variables of rows the option table already has (torchrun reads every flag from PET_<NAME>)
PET_VARS = {"master_addr": "PET_MASTER_ADDR", "master_port": "PET_MASTER_PORT",
            "node_rank": "PET_NODE_RANK"}


def option_rows(make, commands) -> tuple:
    """The option table's torchrun rows, made with its row factory (no import cycle), for
    ``commands``."""
    g = GROUP[0]
    return (
        make(("--nproc-per-node", "--nproc_per_node"), "nproc_per_node",
             "ranks on each host: without a host list this machine's slots; else every host "
             "must have N slots (auto, cpu, gpu: the slots as they are)", g,
             var="PET_NPROC_PER_NODE", shown="the slots of each host", metavar="N", commands=commands),
        make(("--nnodes",), "nnodes", "number of hosts, checked against the hosts "
             "(N or N:N; elastic MIN:MAX is refused)", g, var="PET_NNODES",
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
    )


def _value(setting) -> Tuple[Optional[str], str]:
    value, source = setting
    return (None if value is None else str(value).strip()), source


def nproc(setting) -> Optional[int]:
    """``--nproc-per-node`` as a number, or None (not given, or auto/cpu/gpu)."""
    value, source = _value(setting)
    if value is None or value.lower() in NPROC_WORDS:
        return None
    return contract.whole(value, source, 1, fix="give a number of ranks per host, or auto")


def nnodes(setting) -> Optional[int]:
    value, source = _value(setting)
    if value is None:
        return None
    low, colon, high = value.partition(":")
    if colon:
        lo = contract.whole(low, source, 1, fix="give the number of hosts, such as 2")
        hi = contract.whole(high, source, 1, fix="give the number of hosts, such as 2")
        if lo != hi:
            raise UsageError(f"{source}={value!r}: elastic membership (MIN:MAX) is not "
                             "supported: the hosts of an attempt are fixed; give one number "
                             "(--min-hosts shrinks the job between attempts)")
        return lo
    return contract.whole(value, source, 1, fix="give the number of hosts, such as 2")


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


def check_hosts(nproc_setting, nnodes_setting, np_setting, hosts, hosts_source: str,
                standalone: bool) -> None:
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
    if n is not None and n != count:
        where = (f"{hosts_source} lists {count} host(s)" if hosts_source != "localhost" else
                 "no host list was given (this machine only: -H, --hostfile or an allocation)")
        raise UsageError(f"{nnodes_setting[1]}={n} but {where}; make them agree")
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


def rendezvous(args, addr_setting, port_setting) -> Tuple[Optional[str], tuple]:
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


def run_id(setting) -> str:
    """``TORCHELASTIC_RUN_ID``: ``--rdzv-id`` / ``PET_RDZV_ID``, else an id made now, once per
    launch (every attempt and rank gets this one)."""
    value, _ = _value(setting)
    return value or f"mpilaunch-{os.urandom(6).hex()}"
