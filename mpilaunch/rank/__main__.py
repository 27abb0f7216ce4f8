"""``python -m mpilaunch.rank [opts] -- SCRIPT [ARGS...]``: the rank adapter's entry point.

Parses the options (docs/ARCHITECTURE.md), validates everything a user can get wrong
*before* anything starts, then: ``--exec`` -> derive the env and exec the script; otherwise
agree on the scheduler (agree.py), derive the env (frameworkenv.py) and supervise the
worker (+ scheduler on rank 0) (supervisor.py). A UsageError becomes one line
``mpilaunch.rank: error: ...`` on stderr, a status line ``role: adapter`` and exit 2.
Imports are lazy: mpi4py only when the agreement needs MPI, psutil only when used.
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import List, Optional, Sequence

from mpilaunch.errors import UsageError

PROG = "mpilaunch.rank"
DEFAULT_MASTER_PORT = 8118


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump, no SystemExit(2) from argparse
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="Rank adapter: run SCRIPT as this MPI rank's worker "
                "(and, on rank 0, the framework scheduler) with MindSpore/PyTorch env set.",
                usage="%(prog)s [options] -- SCRIPT [ARGS...]")
    p.add_argument("--log-dir", default=".", help="directory for worker/scheduler logs (default .)")
    p.add_argument("--worker-log-name", default="worker_{rank}.log",
                   help="worker log file name; {ip}, {hostname}, {rank} are replaced")
    p.add_argument("--tail-worker-log", default="-1",
                   help="ranks whose output also goes to the console: -1 (all), none, or 0,2,...")
    p.add_argument("--master-addr", default=None, help="scheduler host (default: rank 0's)")
    p.add_argument("--master-port", default=str(DEFAULT_MASTER_PORT),
                   help=f"scheduler port (default {DEFAULT_MASTER_PORT}; 0 = pick a free one)")
    p.add_argument("--no-scheduler", action="store_true", help="do not start the MindSpore scheduler")
    p.add_argument("--cluster-time-out", default=None, help="MS_TOPO_TIMEOUT seconds (default 600)")
    p.add_argument("--bind-core", default=None,
                   help="True, False, or msrun's JSON dict {\"scheduler\":[\"0-1\"],\"device0\":[...]}")
    p.add_argument("--visible-devices", default=None, help="comma list: DEVICE_ID = list[local rank]")
    p.add_argument("--scheduler-grace", default="300",
                   help="seconds rank 0 waits for the scheduler after its worker exits 0 (default 300: other nodes may still be finishing)")
    p.add_argument("--exec", action="store_true", dest="exec_",
                   help="no MPI, scheduler or supervision: set the env and exec the script")
    p.add_argument("--no-python", action="store_true", help="SCRIPT is an executable")
    p.add_argument("--python", default=None, help="interpreter for SCRIPT (default: this one)")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


class Options(namedtuple("Options", "log_dir worker_log_name tail_worker_log master_addr master_port no_scheduler cluster_time_out bind_core visible_devices scheduler_grace exec_ no_python python command")):
    """The adapter's validated options (a namedtuple: ``dataclasses`` costs every rank ~11 ms)."""

    __slots__ = ()


def _int_flag(flag: str, raw: str, lo: int, hi: Optional[int] = None) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise UsageError(f"{flag} {raw!r} is not an integer") from None
    if value < lo or (hi is not None and value > hi):
        raise UsageError(f"{flag} {raw!r} must be in {lo}..{hi}" if hi is not None
                         else f"{flag} {raw!r} must be >= {lo}")
    return value


def parse_args(argv: Sequence[str]) -> Options:
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        ns = _parser().parse_args(argv[:i])
        if ns.command:
            raise UsageError(f"unexpected argument {ns.command[0]!r} before '--'")
        command = argv[i + 1:]
    else:
        ns = _parser().parse_args(argv)
        command = ns.command
    if not command:
        raise UsageError("no SCRIPT given (usage: python -m mpilaunch.rank [options] -- SCRIPT [ARGS...])")
    try:
        grace = float(ns.scheduler_grace)
    except ValueError:
        raise UsageError(f"--scheduler-grace {ns.scheduler_grace!r} is not a number") from None
    if not grace >= 0:
        raise UsageError(f"--scheduler-grace {ns.scheduler_grace!r} must be >= 0")
    visible = None
    if ns.visible_devices is not None:
        visible = tuple(d.strip() for d in ns.visible_devices.split(","))
        if not any(visible):
            raise UsageError("--visible-devices is empty")
    if ns.master_addr is not None and not ns.master_addr.strip():
        raise UsageError("--master-addr is empty")
    return Options(
        log_dir=ns.log_dir, worker_log_name=ns.worker_log_name,
        tail_worker_log=ns.tail_worker_log,
        master_addr=ns.master_addr.strip() if ns.master_addr else None,
        master_port=_int_flag("--master-port", ns.master_port, 0, 65535),
        no_scheduler=ns.no_scheduler,
        cluster_time_out=(None if ns.cluster_time_out is None
                          else _int_flag("--cluster-time-out", ns.cluster_time_out, 1)),
        bind_core=ns.bind_core, visible_devices=visible, scheduler_grace=grace,
        exec_=ns.exec_, no_python=ns.no_python, python=ns.python, command=command)


def _which(name: str, path: Optional[str]) -> Optional[str]:
    """``shutil.which`` without importing shutil (~5 ms at every rank's start)."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for d in (path if path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def build_argv(opts: Options, env_path: Optional[str]) -> List[str]:
    """The worker's argv; UsageError if the script or interpreter cannot be found."""
    script, args = opts.command[0], opts.command[1:]
    if opts.no_python:
        if opts.python:
            raise UsageError("--python and --no-python exclude each other")
        found = _which(script, path=env_path)
        if found is None:
            raise UsageError(f"executable {script!r} not found (--no-python)")
        return [script] + args
    python = opts.python or sys.executable
    found = _which(python, path=env_path)
    if found is None:
        raise UsageError(f"--python {python!r} is not an executable")
    if not script.startswith("-") and not os.path.isfile(script):
        raise UsageError(f"script {script!r} not found (cwd {os.getcwd()})")
    return [found, script] + args


def _guess_rank(env) -> Optional[int]:
    for name in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK"):
        try:
            return int(env[name])
        except (KeyError, ValueError):
            continue
    return None


def _local_ip(sched_addr: str) -> str:
    from mpilaunch.rank.agree import local_ipv4s, route_source

    if not sched_addr.startswith("127."):
        src = route_source(sched_addr)
        if src:
            return src
    ips = local_ipv4s()
    return ips[0] if ips else "127.0.0.1"


def _interface_towards(addr: str) -> Optional[str]:
    """Name of the local interface holding the address the kernel uses to reach ``addr``."""
    import psutil

    src = _local_ip(addr)
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == src for a in addrs):
            return None if name == "lo" else name
    return None


def run(opts: Options, info, user_env: dict, hostname: str) -> int:
    from mpilaunch.rank import affinity, logs
    from mpilaunch.rank.frameworkenv import FrameworkOpts, device_id, framework_env

    # -- everything a user can get wrong, before anything starts
    tail = logs.parse_tail_spec(opts.tail_worker_log)
    if tail and info.size is not None:
        bad = sorted(r for r in tail if r >= info.size)
        if bad:
            raise UsageError(f"--tail-worker-log: rank {bad[0]} does not exist "
                             f"(the job has {info.size} ranks)")
    logs.check_log_name(opts.worker_log_name)
    bind = affinity.parse_bind_core(opts.bind_core, os.cpu_count())
    fw = FrameworkOpts(opts.cluster_time_out, opts.visible_devices)
    if info.complete:
        device_id(info, fw, user_env)
    argv = build_argv(opts, user_env.get("PATH"))

    if opts.exec_:
        return exec_script(opts, info, user_env, fw, bind, argv)

    try:
        os.makedirs(opts.log_dir, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--log-dir {opts.log_dir!r} cannot be created: {exc.strerror}") from None
    if not os.access(opts.log_dir, os.W_OK | os.X_OK):
        raise UsageError(f"--log-dir {opts.log_dir!r} is not writable")

    from mpilaunch.rank.agree import agree

    ag = agree(info, opts.master_addr, opts.master_port)
    info = ag.info
    worker_env = framework_env(info, ag.sched_addr, ag.sched_port, fw, user_env)
    with_scheduler = info.rank == 0 and not opts.no_scheduler
    if not info.single_node and not user_env.get("GLOO_SOCKET_IFNAME"):
        # Gloo picks its interface by resolving this host's name, and falls back to loopback
        # when the name does not resolve: then no rank reaches another. Use the interface that
        # routes to rank 0's address instead (a user's own GLOO_SOCKET_IFNAME wins).
        ifname = _interface_towards(ag.sched_addr)
        if ifname:
            worker_env["GLOO_SOCKET_IFNAME"] = ifname

    ip = _local_ip(ag.sched_addr) if "{ip}" in opts.worker_log_name else ""
    worker_log = os.path.join(opts.log_dir, logs.worker_log_name(
        opts.worker_log_name, info.rank, hostname, ip))
    if os.path.dirname(worker_log):
        os.makedirs(os.path.dirname(worker_log), exist_ok=True)
    worker_cpus = sched_cpus = None
    if bind is not None:
        worker_cpus, sched_cpus = affinity.plan_cpus(
            bind, affinity.available_cpus(), affinity.read_numa_nodes(), info.local_rank,
            info.local_size, info.node_index == 0 and not opts.no_scheduler,
            worker_env["DEVICE_ID"])

    from mpilaunch.rank.supervisor import ChildSpec, supervise

    specs = []
    if with_scheduler:
        specs.append(ChildSpec(
            role="scheduler", argv=argv,
            env=framework_env(info, ag.sched_addr, ag.sched_port, fw, user_env, role="scheduler"),
            log_path=os.path.join(opts.log_dir, logs.SCHEDULER_LOG_NAME), cpus=sched_cpus))
    specs.append(ChildSpec(
        role="worker", argv=argv, env=worker_env, log_path=worker_log,
        tail_prefix=(f"[rank{info.rank}] ".encode() if logs.is_tailed(tail, info.rank) else None),
        cpus=worker_cpus, inherit_stdin=True))
    return supervise(specs, info.rank, hostname, scheduler_grace=opts.scheduler_grace,
                     local_size=info.local_size)


def exec_script(opts: Options, info, user_env: dict, fw, bind, argv: List[str]) -> int:
    """``--exec``: no MPI, no scheduler, no supervision, no log files: derive the env and
    ``execvpe`` the script (it inherits the adapter's PDEATHSIG, so losing mpirun ends it).

    Only what the environment alone tells is available: single node -> node index 0 and
    ``127.0.0.1``; Slurm -> node index from ``SLURM_NODEID``, ``--master-addr`` required;
    Open MPI / Hydra across nodes -> ``--master-addr`` required and ``NODE_RANK`` /
    ``GROUP_RANK`` are left unset (no node index without MPI). ``--master-port 0`` and a
    PMIx-only launcher are usage errors. Rank 0 still checks the port is free.
    """
    from mpilaunch.rank import affinity
    from mpilaunch.rank.agree import LOOPBACK, check_port, resolve_ipv4
    from mpilaunch.rank.frameworkenv import framework_env

    if not info.complete:
        raise UsageError(f"--exec: the {info.launcher} launcher does not give the world size "
                         f"and local rank; run without --exec")
    if opts.master_port == 0:
        raise UsageError("--exec cannot use --master-port 0 (picking a port needs the MPI "
                         "agreement); give a port")
    if not info.single_node and not opts.master_addr:
        raise UsageError("--exec with ranks on several hosts needs --master-addr (rank 0's "
                         "address cannot be learnt without MPI)")
    addr = resolve_ipv4(opts.master_addr) if opts.master_addr else LOOPBACK
    if info.rank == 0:
        check_port(addr, opts.master_port, info.hostname)
    env = framework_env(info, addr, opts.master_port, fw, user_env)
    if bind is not None:
        cpus, _ = affinity.plan_cpus(bind, affinity.available_cpus(), affinity.read_numa_nodes(),
                                     info.local_rank, info.local_size, False, env["DEVICE_ID"])
        if cpus:
            os.sched_setaffinity(0, cpus)
    if not opts.no_python and os.path.realpath(argv[0]) == os.path.realpath(sys.executable):
        # Run the MPI program under mpi4py's runner: an exception or a non-zero sys.exit then
        # calls MPI_Abort, instead of waiting in MPI_Finalize for ranks that will never come
        # (62 s measured). Only for our own interpreter, which is known to have mpi4py.
        argv = [argv[0], "-m", "mpi4py"] + list(argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        raise UsageError(f"cannot exec {argv[0]!r}: {exc.strerror}") from None
    return 0  # pragma: no cover


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from mpilaunch.rank import status

    hostname = socket.gethostname()
    rank = _guess_rank(os.environ)
    try:
        opts = parse_args(argv)
        # Losing our parent (mpirun/orted/prted) must end us, and through us our children.
        parent = os.getppid()
        from mpilaunch.pdeathsig import set_parent_death_signal

        set_parent_death_signal(signal.SIGTERM)
        if os.getppid() != parent:
            return 128 + signal.SIGTERM
        user_env = dict(os.environ)          # taken before agree.py tunes OMPI_MCA_btl
        from mpilaunch.rank.identity import read_identity

        info = read_identity(user_env, hostname)
        rank = info.rank
        return run(opts, info, user_env, hostname)
    except UsageError as exc:
        status.write_stderr(f"{PROG}: error: {exc}\n")
        status.emit(rank, hostname, "adapter", "error", 2, None, "self", None, [], message=str(exc))
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # agree.PeerFailed, without importing agree when not needed
        from mpilaunch.rank.agree import PeerFailed

        if isinstance(exc, PeerFailed):
            status.emit(rank, hostname, "adapter", "error", 2, None, "terminated", None, [],
                        message=exc.message)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
