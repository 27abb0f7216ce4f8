"""Configuration: CLI flags over the ModelArts environment over defaults, validated in one place.

Precedence: flag > variable > default. Every problem is a ``UsageError`` naming the flag or
variable, raised before anything starts.
"""
import argparse
import os
import sys
from typing import Any, Mapping, NamedTuple, Optional, Sequence, Tuple

from mpilaunch import contract, net
from mpilaunch.config import allocation
from mpilaunch.config import hostfile as hf
from mpilaunch.config import (mpiargs, monitoring, msrun, options, preflight, programs, resilience,
                              sshconfig,
                              torchrun, tuneimport)
from mpilaunch.config.broadcast import DEFAULT_PREFIXES
from mpilaunch.config.preflight import DeepSettings
from mpilaunch.config.resilience import Resilience
from mpilaunch.errors import UsageError

# Ranks of one job: Open MPI counts them in a C int; far beyond any real job, far below overflow.
MAX_NP = 10_000_000


class Setting(NamedTuple):
    """A resolved value and where it came from (for messages and --dry-run)."""

    value: Any          # as the option table gives it: a string, a flag's value or default
    source: str


# Where the hosts of a launch came from (LaunchConfig.hosts_from), in the order they are
# looked for: the user's -H, hostfile or VC_WORKER_HOSTS, what a scheduler or MPI operator
# allocated (allocation.py), else this machine.
FROM_H, FROM_HOSTFILE, FROM_VC_WORKER_HOSTS, FROM_LOCAL = "-H", "hostfile", "vc_worker_hosts", "local"
HOSTS_FROM = (FROM_H, FROM_HOSTFILE, FROM_VC_WORKER_HOSTS, allocation.SLURM,
              allocation.KUBEFLOW, allocation.VOLCANO, FROM_LOCAL)


class LaunchConfig(NamedTuple):
    """Everything the user asked for, validated, each field's type checked (mypy). A NamedTuple
    without ``from __future__ import annotations`` (docs/ARCHITECTURE.md, start-up)."""

    script: Optional[str]               # None with -m MODULE
    script_args: Tuple[str, ...]
    hosts: Tuple[hf.Host, ...]
    hosts_source: str                   # where the hosts came from, said in messages
    hosts_from: str                     # the same, one of HOSTS_FROM: decisions test this
    np: int
    np_source: str                      # where np came from, for messages
    oversubscribe: bool
    ssh_port: Optional[int]
    ssh_extra: Tuple[str, ...]
    tune_path: Optional[str]            # TUNE_ENV_FILE / --tune-file; None: the private run dir
    keep_tune_file: bool
    env_prefixes: Tuple[str, ...]
    bind_args: Setting                  # the OPENMPI_*_ARGS strings as given (mpi_pieces: words)
    x_args: Setting
    mca_args: Setting
    extra_args: Setting
    mpirun: Optional[str]               # --mpirun (MPILAUNCH_MPIRUN is read by mpi.detect)
    python: str                         # the ranks' interpreter, absolute
    dry_run: bool
    # passed through to the rank adapter
    log_dir: str
    worker_log_name: Optional[str]
    tail_worker_log: str                # canonical (contract.tail_spec_text)
    master_addr: Optional[str]
    master_port: int
    cluster_time_out: Optional[int]     # None: the rank keeps MS_TOPO_TIMEOUT, else 600
    bind_core: Optional[str]
    scheduler: bool
    exec_mode: bool
    no_python: bool
    visible_devices: Optional[str]
    # a tune file the user already wrote (ModelArts recipe), read, never overwritten
    tune_import: Optional[tuneimport.TuneImport] = None
    # the starter, what starts the ranks (--launcher): "mpirun" or "srun" (backends/srun.py)
    starter: str = "mpirun"
    module: Optional[str] = None        # -m MODULE (script is then None)
    stdin: Optional[str] = None         # mpirun's --stdin target
    scheduler_why: str = ""             # why the scheduler is (not) started
    port_check: bool = True             # rank 0 checks the port (--exec: only a port given)
    rank_extra: Tuple[str, ...] = ()    # more adapter flags, before '--' (nextattempt.attempt_cfg)
    # msrun's: --bind_numa (its file's content), DryRun's level/rank/size, the rank table's path
    bind_numa: Optional[str] = None
    sim_level: Optional[int] = None
    sim_rank_id: Optional[int] = None
    sim_world: Optional[int] = None
    rank_table_file: Optional[str] = None
    # the user's mpirun pieces (bind, x, mca, extra, a tune file's lines), split once: every backend reads these
    mpi_pieces: Tuple[mpiargs.Piece, ...] = ()
    # the run command's resilience settings as the backend can honour them (run.py; None for check, job)
    resilience: Optional[Resilience] = None
    preflight: str = "ssh"              # --preflight's level (config/preflight.py)
    deep: Optional[DeepSettings] = None   # None: no deep check
    run_id: Optional[str] = None        # TORCHELASTIC_RUN_ID of every torch worker
    monitor_interval: float = 0.0       # the adapters' sample interval (s, 0 = off)
    torchrun: Optional[str] = None      # torchrun's per-worker flags, for the adapters (torchrun.rank_spec)
    console: Tuple[float, int] = (0.0, 0)   # --console_collapse (s), --console_budget (bytes/s)


def _layer(args: argparse.Namespace, env: Mapping[str, str], dest: str) -> Setting:
    """flag > variable > default, as the option table declares it."""
    return Setting(*options.setting(args, env, dest))


def slots_per_host(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Slots of each ``VC_WORKER_HOSTS`` host: ``--local_worker_num`` > ``MA_NUM_GPUS`` >
    ``--nproc-per-node`` > 1. The one answer for ``mpilaunch`` and ``mpilaunch job``."""
    value, source = options.setting(args, env, "local_worker_num")
    per_node = torchrun.nproc(options.setting(args, env, "nproc_per_node"))
    if source == "default" and per_node is not None:
        return per_node
    return contract.whole(value, source, 1, hf.MAX_SLOTS)


def ssh_port(args: argparse.Namespace, env: Mapping[str, str]) -> Optional[int]:
    """``--ssh-port`` > ``SSHD_PORT`` > None (ssh's own default)."""
    value, source = options.setting(args, env, "ssh_port")
    return None if value is None else contract.port(value, source)


def ssh_extra(args: argparse.Namespace) -> Tuple[str, ...]:
    return tuple(mpiargs.split_arg_string(args.ssh_args, "--ssh-args")) if args.ssh_args else ()


def _is_pseudo_fs(path: str) -> bool:
    """/proc, /sys: root may 'write' there by access(), but no file can be created."""
    real = os.path.realpath(path)
    return any(real == top or real.startswith(top + "/") for top in ("/proc", "/sys"))


def _resolve_hosts(args: argparse.Namespace, env: Mapping[str, str]) -> Tuple[Tuple[hf.Host, ...], str, str]:
    """-> (hosts, hosts_source: for messages, hosts_from: one of HOSTS_FROM)."""
    hostfile = _layer(args, env, "hostfile")
    if args.host is not None and hostfile.source == "--hostfile":
        raise UsageError("--hostfile and -H/--host both given; use one")
    if args.host is not None:
        return tuple(hf.parse_host_list(args.host, "-H")), "-H", FROM_H
    if hostfile.value:
        return (tuple(hf.read_hostfile(str(hostfile.value))),
                f"{hostfile.source}={hostfile.value}", FROM_HOSTFILE)
    if env.get("VC_WORKER_HOSTS"):
        slots = slots_per_host(args, env)
        return (tuple(hf.hosts_from_vc_worker_hosts(env["VC_WORKER_HOSTS"], slots)),
                "VC_WORKER_HOSTS", FROM_VC_WORKER_HOSTS)
    # What a scheduler or MPI operator allocated (Slurm, mpi-operator, Volcano): allocation.py
    found = allocation.discover(env, lambda: slots_per_host(args, env))
    if found is not None:
        return found.hosts, found.source, found.kind
    # No host list at all: this machine only, as msrun does for a single node.
    np_value, np_source = options.setting(args, env, "np")
    per_node = torchrun.nproc(options.setting(args, env, "nproc_per_node"))
    if args.local_worker_num is not None:
        slots = contract.whole(args.local_worker_num, "--local_worker_num", 1, hf.MAX_SLOTS)
    elif per_node is not None:
        slots = per_node
    elif np_value is not None:
        slots = contract.whole(np_value, np_source, 1, MAX_NP)
    else:
        slots = os.cpu_count() or 1
    return (hf.Host("localhost", slots),), "localhost", FROM_LOCAL


def _prefixes(setting: Setting) -> Tuple[str, ...]:
    """The variable-name prefixes to broadcast: the setting's, else the default ones."""
    if not setting.value:
        return DEFAULT_PREFIXES
    value, source = str(setting.value), setting.source
    items = tuple(p.strip() for p in value.split(",") if p.strip())
    if not items:
        raise UsageError(f"{source}={value!r}: give at least one prefix")
    for p in items:
        if not p.replace("_", "A").isalnum():
            raise UsageError(f"{source}: {p!r} is not a variable-name prefix")
    return items


def build(args: argparse.Namespace, env: Mapping[str, str]) -> LaunchConfig:
    """argparse namespace + environment -> validated LaunchConfig (pure but for reading files)."""
    torchrun.prepare(args, env, options.BY_DEST)   # torchrun's PET_* variables; its refusals
    script, module = _program(args)
    hosts, hosts_source, hosts_from = _resolve_hosts(args, env)
    np, np_source = _np(args, env, hosts, hosts_source)
    tune_path, tune_import = _tune_file(args, env)
    prefixes = _prefixes(_layer(args, env, "env_prefixes"))
    master_addr, master_port, port_check = _rendezvous(args, env, hosts)
    time_out = (contract.whole(args.cluster_time_out, "--cluster_time_out", 1)
                if args.cluster_time_out is not None else None)
    python = _python(args)
    scheduler, scheduler_why = _scheduler(args, env, script, module, hosts, master_port)
    sim_level, sim_rank_id = msrun.sim(args, env, np)
    if sim_level is not None or env.get("MS_SIMULATION_LEVEL", "").strip():
        scheduler, scheduler_why = False, "MindSpore's DryRun (--sim_level) runs no scheduler"
    sim_world = None
    if sim_rank_id is not None:   # msrun: one process, simulating that rank of the job
        np, sim_world = 1, np
    msrun.node_rank_note(options.setting(args, env, "node_rank"), hosts)
    bind_args, x_args = _layer(args, env, "bind_args"), _layer(args, env, "x_args")
    mca_args, extra_args = _layer(args, env, "mca_args"), _layer(args, env, "extra_args")
    pieces = mpiargs.pieces((bind_args, x_args, mca_args, extra_args), tune_import)
    port, extra, starter = _ssh(args, env, hosts, hosts_source, pieces)
    cfg = LaunchConfig(
        bind_numa=msrun.bind_numa(args.bind_numa), sim_level=sim_level, sim_rank_id=sim_rank_id,
        sim_world=sim_world, rank_table_file=msrun.rank_table(args.rank_table_file),
        script=script, module=module, stdin=_stdin(args.stdin), scheduler_why=scheduler_why,
        port_check=port_check, script_args=tuple(args.script_args),
        hosts=hosts, hosts_source=hosts_source, hosts_from=hosts_from, np=np, np_source=np_source,
        oversubscribe=bool(args.oversubscribe), ssh_port=port, ssh_extra=extra,
        tune_path=tune_path, tune_import=tune_import, keep_tune_file=bool(args.keep_tune_file),
        env_prefixes=prefixes, bind_args=bind_args, x_args=x_args, mca_args=mca_args,
        extra_args=extra_args, mpi_pieces=pieces,
        mpirun=args.mpirun,   # MPILAUNCH_MPIRUN is read by mpi.detect (with PATH)
        python=python, dry_run=bool(args.dry_run), log_dir=_layer(args, env, "log_dir").value,
        worker_log_name=args.worker_log_name,
        tail_worker_log=contract.tail_spec_text(
            contract.parse_tail_spec(_layer(args, env, "tail_worker_log").value)),
        master_addr=master_addr, master_port=master_port, cluster_time_out=time_out,
        bind_core=args.bind_core, scheduler=scheduler, exec_mode=bool(args.exec_mode),
        no_python=bool(args.no_python), visible_devices=args.visible_devices, starter=starter,
        # only a torch worker reads it (not MindSpore's, not an --exec program)
        run_id=(torchrun.run_id(options.setting(args, env, "rdzv_id"))
                if not scheduler and not args.exec_mode else None),
        torchrun=torchrun.rank_spec(args, env) if not args.exec_mode else None,
    )
    level = preflight.preflight_level(args, env) if hasattr(args, "preflight") else "ssh"
    deep = (preflight.deep_settings(args, env)
            if level == "deep" or getattr(args, "check_deep", False) else None)
    cfg = cfg._replace(preflight=level, deep=deep)
    if hasattr(args, "max_restarts"):   # the run command's (check's and job's own have none)
        cfg = cfg._replace(resilience=resilience.settings(args, env, cfg))
    if hasattr(args, "monitor_interval"):   # the run command's
        cfg = cfg._replace(monitor_interval=monitoring.interval(args.monitor_interval, cfg))
    if hasattr(args, "console_collapse"):   # output/console.py's window (s; 0: off), budget (bytes/s; 0: none)
        w, b = (_layer(args, env, d) for d in ("console_collapse", "console_budget"))   # named as given
        cfg = cfg._replace(console=(contract.seconds(w.value, w.source, True), contract.whole(b.value, b.source, 0)))
    return cfg


def _program(args: argparse.Namespace) -> Tuple[Optional[str], Optional[str]]:
    """(the script, the -m module): one of them, checked."""
    module = getattr(args, "module", None)
    if module and args.no_python and not args.script:
        raise UsageError(f"-m {module} and --no-python exclude each other (-m runs a Python "
                         "module; --no-python an executable)")
    if not args.script and not module:
        raise UsageError("no script given: mpilaunch [options] SCRIPT [ARGS...] "
                         "(or -m MODULE [ARGS...])")
    script = None if module else args.script
    if script and not args.no_python and not args.exec_mode and not os.path.isfile(script):
        raise UsageError(f"script {script}: no such file")
    return script, module


def _python(args: argparse.Namespace) -> str:
    """The ranks' Python: an absolute path."""
    python = args.python or sys.executable
    if not os.path.isabs(python):
        raise UsageError(f"--python={python}: give an absolute path (ranks may get another PATH)")
    return python


def _np(args: argparse.Namespace, env: Mapping[str, str], hosts: Sequence[hf.Host], hosts_source: str) -> Tuple[int, str]:
    """(the number of ranks, where it came from): the hosts' slots unless given, within them
    unless --oversubscribe."""
    slots = hf.total_slots(hosts)
    np_setting = _layer(args, env, "np")
    torchrun.check_hosts(options.setting(args, env, "nproc_per_node"),
                         options.setting(args, env, "nnodes"), np_setting, hosts, hosts_source,
                         bool(getattr(args, "standalone", False)))
    if np_setting.value is None:
        np, np_source = slots, f"total slots of {hosts_source}"
    else:
        np, np_source = contract.whole(np_setting.value, np_setting.source, 1, MAX_NP), np_setting.source
    if np > slots and not args.oversubscribe:
        raise UsageError(
            f"{np_source}={np} is more than the {slots} slot(s) of {hosts_source}; "
            "add slots or pass --oversubscribe"
        )
    return np, np_source


def _tune_file(args: argparse.Namespace, env: Mapping[str, str]) -> Tuple[Optional[str], Optional[tuneimport.TuneImport]]:
    """(the tune file to write, None when there is none or it is imported; what it imports)."""
    tune = _layer(args, env, "tune_file")
    tune_path = str(tune.value) if tune.value else None
    if tune_path and os.path.lexists(tune_path):
        # The ModelArts recipe's `env | grep ... > $TUNE_ENV_FILE`: the user's statement of what
        # to broadcast. Read it; write our own tune file in the private run dir.
        return None, tuneimport.read(tune_path, tune.source)
    if tune_path:
        parent = os.path.dirname(os.path.abspath(tune_path))
        if not os.path.isdir(parent):
            raise UsageError(f"{tune.source}={tune_path}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK | os.X_OK) or _is_pseudo_fs(parent):
            raise UsageError(f"{tune.source}={tune_path}: cannot create files in {parent}; "
                             "choose a path in a writable directory")
    return tune_path, None


def _rendezvous(args: argparse.Namespace, env: Mapping[str, str], hosts: Sequence[hf.Host]) -> Tuple[Optional[str], int, bool]:
    """(master_addr, master_port, whether rank 0 checks the port)."""
    master_addr, (master_port, port_source) = torchrun.rendezvous(
        args, options.setting(args, env, "master_addr"), options.setting(args, env, "master_port"))
    master_port = contract.master_port(master_port, port_source)
    if port_source == "--standalone" and net.rank0_is_here(hosts):
        master_port = net.free_port()   # torchrun's localhost:0, picked here for rank 0
    port_check = True
    if args.exec_mode:
        master_port, port_check = _exec_port(master_port, port_source, hosts)
    return master_addr, master_port, port_check


def _ssh(args: argparse.Namespace, env: Mapping[str, str], hosts: Sequence[hf.Host], hosts_source: str,
         pieces: Sequence[mpiargs.Piece]) -> Tuple[Optional[int], Tuple[str, ...], str]:
    """(the ssh port, the ssh args, the starter), the ssh options given once and valid for
    the hosts (a port per host: every ssh of the launch can use it)."""
    port, extra = ssh_port(args, env), ssh_extra(args)
    starter = _starter(args, env)
    if starter == "mpirun" and (port is not None or extra) and mpiargs.ssh_params_given(pieces):
        raise UsageError("the ssh options are given twice: SSHD_PORT/--ssh-port/--ssh-args and a "
                         "plm_rsh_args in the MCA/extra args; keep one")
    sshconfig.validate(hosts, hosts_source, extra, starter, allocation.in_slurm(env),
                       mpiargs.ssh_params_given(pieces))
    return port, extra, starter


def _starter(args: argparse.Namespace, env: Mapping[str, str]) -> str:
    value, source = options.setting(args, env, "starter")   # source: --launcher or its variable
    if value not in ("mpirun", "srun"):
        raise UsageError(f"{source}={value!r}: give mpirun or srun")
    return value


def _stdin(value: Optional[str]) -> Optional[str]:
    """mpirun's ``--stdin`` target as the user gave it (a rank, ``all``, ``none``), or None:
    rank 0, but ``none`` when the launcher's own stdin is closed or /dev/null (decided where
    mpirun is started, ``supervise.relays.stdin_target``)."""
    if value is None:
        return None
    v = value.strip().lower()
    if v in ("all", "none") or (v.isdigit() and int(v) < MAX_NP):
        return str(int(v)) if v.isdigit() else v
    raise UsageError(f"--stdin={value!r}: give a rank (0 is mpirun's default), all or none")


def _exec_port(port: int, source: str, hosts: Sequence[hf.Host]) -> Tuple[int, bool]:
    """``--exec``: an MPI program does its own rendezvous; the port is only what
    MASTER_PORT/MS_SCHED_PORT say. -> (port, check it on rank 0). A port the user gave is
    checked; ``0`` or the default becomes a port free on this machine when rank 0 runs here
    (nothing to check); else the default is passed on unchecked, and ``0`` is refused (no
    MPI agreement runs under --exec to pick one)."""
    if source != "default" and port != 0:
        return port, True

    if net.rank0_is_here(hosts):
        return net.free_port(), False
    if port == 0:
        raise UsageError(f"{source}=0: --exec cannot pick a port when rank 0 runs on another "
                         f"host ({hosts[0].name}); give a port, or leave --master_port out "
                         "(an MPI program does not use it)")
    return port, False


def _scheduler(args: argparse.Namespace, env: Mapping[str, str], script: Optional[str], module: Optional[str],
               hosts: Sequence[hf.Host], port: int) -> Tuple[bool, str]:
    """(start MindSpore's scheduler on rank 0, why): ``--scheduler`` / ``--no-scheduler``,
    else only for MindSpore jobs (mpilaunch/config/programs.py). An MPI program (mpi4py, Horovod)
    without ``--exec`` runs supervised only where the adapter never calls MPI_Init itself
    (one host, a fixed port); elsewhere it is refused, naming --exec."""
    if args.scheduler and args.no_scheduler:
        raise UsageError("--scheduler and --no-scheduler both given; use one")
    if args.exec_mode:
        return False, "--exec"

    prog = programs.inspect(script, module, args.script_args, bool(args.no_python),
                            env.get("PATH"))
    what = f"-m {module}" if module else (script or "")

    several = net.spans_machines(hosts)
    if prog.mpi is not None and (several or port == 0):
        where = "ranks on several hosts" if several else "--master_port 0"
        raise UsageError(f"{what} is an MPI program ({os.path.basename(prog.mpi.path)} "
                         f"imports {prog.mpi.module}); with {where} the rank adapter itself "
                         "initialises MPI, so run it with --exec")
    if args.scheduler:
        return True, "--scheduler"
    if args.no_scheduler:
        return False, "--no-scheduler"
    if prog.mindspore is not None:
        return True, (f"{os.path.basename(prog.mindspore.path)} imports "
                      f"{prog.mindspore.module}")
    intent = programs.ms_intent(env)
    if intent:
        return True, f"{intent} is set (a MindSpore dynamic-cluster variable)"
    if prog.entry is None:
        return False, f"{what or 'the program'} could not be read to look for mindspore"
    return False, f"{what} does not import mindspore"
