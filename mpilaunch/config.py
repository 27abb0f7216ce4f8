"""Configuration: CLI flags over the ModelArts environment over defaults, validated in one place.

Precedence: flag > variable > default. Every problem is a ``UsageError`` naming the flag or
variable, raised before anything starts.
"""
from __future__ import annotations

import os
import sys
from collections import namedtuple
from typing import Mapping, Optional, Tuple

from mpilaunch import hostfile as hf
from mpilaunch.errors import UsageError
from mpilaunch.tune import DEFAULT_PREFIXES

# ModelArts defaults (seed 003), written as ModelArts writes them; render.normalize()
# translates the spellings for the Open MPI in use.
DEFAULT_BIND_ARGS = "-bind-to none -map-by slot"
DEFAULT_X_ARGS = (
    "-x LD_LIBRARY_PATH -x HOROVOD_MPI_THREADS_DISABLE=1 -x NCCL_DEBUG=INFO "
    "-x NCCL_SOCKET_IFNAME=ib0,bond0,eth0 -x NCCL_SOCKET_FAMILY=AF_INET -x NCCL_IB_DISABLE=0"
)
DEFAULT_MCA_ARGS = "-mca pml ob1 -mca btl ^openib -mca plm_rsh_no_tree_spawn true"
DEFAULT_EXTRA_ARGS = ""
DEFAULT_MASTER_PORT = 8118


class Setting(namedtuple("Setting", "value source")):
    """A resolved value and where it came from (for messages and --dry-run)."""

    __slots__ = ()


_CONFIG_FIELDS = (
    "script script_args hosts hosts_source np np_source oversubscribe ssh_port ssh_extra "
    "tune_path keep_tune_file env_prefixes bind_args x_args mca_args extra_args mpirun python "
    "dry_run "
    # passed through to the rank adapter
    "log_dir worker_log_name tail_worker_log master_addr master_port cluster_time_out "
    "bind_core scheduler exec_mode no_python visible_devices"
)


class LaunchConfig(namedtuple("LaunchConfig", _CONFIG_FIELDS)):
    """Everything the user asked for, validated. Notable fields: ``hosts`` (tuple of Host),
    ``np_source``/``hosts_source`` (where the value came from, for messages), ``tune_path``
    (TUNE_ENV_FILE / --tune-file; None = the private run dir), ``bind_args``..``extra_args``
    (Setting: the OPENMPI_* strings as given), ``cluster_time_out`` (None: the rank keeps the
    user's MS_TOPO_TIMEOUT, else 600). A namedtuple: ``dataclasses`` costs ~12 ms of start-up
    at every launch."""

    __slots__ = ()


def _int(value: str, source: str, lo: int, hi: Optional[int] = None) -> int:
    try:
        number = int(str(value).strip(), 10)
    except ValueError:
        raise UsageError(f"{source}={value!r}: must be a whole number") from None
    if number < lo or (hi is not None and number > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise UsageError(f"{source}={number}: must be {bound}")
    return number


def _layer(flag_value, flag_name: str, env: Mapping[str, str], var: str, default) -> Setting:
    if flag_value is not None:
        return Setting(flag_value, flag_name)
    if var in env:
        return Setting(env[var], var)
    return Setting(default, "default")


def _resolve_hosts(args, env: Mapping[str, str]) -> Tuple[Tuple[hf.Host, ...], str]:
    hostfile = _layer(args.hostfile, "--hostfile", env, "OPENMPI_HOST_FILE_PATH", None)
    if args.host is not None and hostfile.source == "--hostfile":
        raise UsageError("--hostfile and -H/--host both given; use one")
    if args.host is not None:
        return tuple(hf.parse_host_list(args.host, "-H")), "-H"
    if hostfile.value:
        return tuple(hf.read_hostfile(str(hostfile.value))), f"{hostfile.source}={hostfile.value}"
    if env.get("VC_WORKER_HOSTS"):
        per_host = _layer(args.local_worker_num, "--local_worker_num", env, "MA_NUM_GPUS", 1)
        slots = _int(per_host.value, per_host.source, 1)
        return tuple(hf.hosts_from_vc_worker_hosts(env["VC_WORKER_HOSTS"], slots)), "VC_WORKER_HOSTS"
    # No host list at all: this machine only, as msrun does for a single node.
    if args.local_worker_num is not None:
        slots = _int(args.local_worker_num, "--local_worker_num", 1)
    elif args.np is not None:
        slots = _int(args.np, "--np", 1)
    elif env.get("OPENMPI_NP"):
        slots = _int(env["OPENMPI_NP"], "OPENMPI_NP", 1)
    else:
        slots = os.cpu_count() or 1
    return (hf.Host("localhost", slots),), "localhost"


def _tail_spec(value: str) -> str:
    text = str(value).strip()
    if text in ("-1", "none", "all"):
        return "-1" if text == "all" else text
    parts = [p.strip() for p in text.split(",")]
    for p in parts:
        if not p.isdigit():
            raise UsageError(f"--tail_worker_log={value!r}: expected -1, none, or a comma list of ranks")
    return ",".join(str(int(p)) for p in parts)


def _prefixes(value: str, source: str) -> Tuple[str, ...]:
    items = tuple(p.strip() for p in value.split(",") if p.strip())
    if not items:
        raise UsageError(f"{source}={value!r}: give at least one prefix")
    for p in items:
        if not p.replace("_", "A").isalnum():
            raise UsageError(f"{source}: {p!r} is not a variable-name prefix")
    return items


def build(args, env: Mapping[str, str]) -> LaunchConfig:
    """argparse namespace + environment -> validated LaunchConfig (pure but for reading files)."""
    if not args.script:
        raise UsageError("no script given: mpilaunch [options] SCRIPT [ARGS...]")
    script = args.script
    if not args.no_python and not args.exec_mode and not os.path.isfile(script):
        raise UsageError(f"script {script}: no such file")

    hosts, hosts_source = _resolve_hosts(args, env)
    slots = hf.total_slots(hosts)
    np_setting = _layer(args.np, "--np", env, "OPENMPI_NP", None)
    if np_setting.value is None or np_setting.value == "":
        np, np_source = slots, f"total slots of {hosts_source}"
    else:
        np, np_source = _int(np_setting.value, np_setting.source, 1), np_setting.source
    if np > slots and not args.oversubscribe:
        raise UsageError(
            f"{np_source}={np} is more than the {slots} slot(s) of {hosts_source}; "
            "add slots or pass --oversubscribe"
        )

    port_setting = _layer(args.ssh_port, "--ssh-port", env, "SSHD_PORT", None)
    ssh_port = None
    if port_setting.value not in (None, ""):
        ssh_port = _int(port_setting.value, port_setting.source, 1, 65535)

    from mpilaunch.render import split_arg_string

    ssh_extra = tuple(split_arg_string(args.ssh_args, "--ssh-args")) if args.ssh_args else ()

    tune = _layer(args.tune_file, "--tune-file", env, "TUNE_ENV_FILE", None)
    tune_path = str(tune.value) if tune.value else None
    if tune_path:
        parent = os.path.dirname(os.path.abspath(tune_path))
        if os.path.lexists(tune_path):
            raise UsageError(f"{tune.source}={tune_path}: file exists; mpilaunch will not overwrite it (remove it or choose another path)")
        if not os.path.isdir(parent):
            raise UsageError(f"{tune.source}={tune_path}: directory {parent} does not exist")

    prefixes_setting = _layer(args.env_prefixes, "--env-prefixes", env, "MPILAUNCH_ENV_PREFIXES", None)
    prefixes = (
        _prefixes(str(prefixes_setting.value), prefixes_setting.source)
        if prefixes_setting.value else DEFAULT_PREFIXES
    )

    master_port = _int(args.master_port, "--master_port", 0, 65535) if args.master_port is not None else DEFAULT_MASTER_PORT
    if 0 < master_port < 1024:
        raise UsageError(f"--master_port={master_port}: must be 0 (pick a free port) or 1024-65535")
    cluster_time_out = (
        _int(args.cluster_time_out, "--cluster_time_out", 1) if args.cluster_time_out is not None else None
    )

    python = args.python or sys.executable
    if not os.path.isabs(python):
        raise UsageError(f"--python={python}: give an absolute path (ranks may get another PATH)")

    return LaunchConfig(
        script=script,
        script_args=tuple(args.script_args),
        hosts=hosts,
        hosts_source=hosts_source,
        np=np,
        np_source=np_source,
        oversubscribe=bool(args.oversubscribe),
        ssh_port=ssh_port,
        ssh_extra=ssh_extra,
        tune_path=tune_path,
        keep_tune_file=bool(args.keep_tune_file),
        env_prefixes=prefixes,
        bind_args=_layer(args.bind_args, "--bind-args", env, "OPENMPI_BIND_ARGS", DEFAULT_BIND_ARGS),
        x_args=_layer(args.x_args, "--x-args", env, "OPENMPI_X_ARGS", DEFAULT_X_ARGS),
        mca_args=_layer(args.mca_args, "--mca-args", env, "OPENMPI_MCA_ARGS", DEFAULT_MCA_ARGS),
        extra_args=_layer(args.extra_args, "--extra-args", env, "OPENMPI_EXTRA_ARGS", DEFAULT_EXTRA_ARGS),
        mpirun=args.mpirun,
        python=python,
        dry_run=bool(args.dry_run),
        log_dir=args.log_dir,
        worker_log_name=args.worker_log_name,
        tail_worker_log=_tail_spec(args.tail_worker_log),
        master_addr=args.master_addr,
        master_port=master_port,
        cluster_time_out=cluster_time_out,
        bind_core=args.bind_core,
        scheduler=not args.no_scheduler,
        exec_mode=bool(args.exec_mode),
        no_python=bool(args.no_python),
        visible_devices=args.visible_devices,
    )
