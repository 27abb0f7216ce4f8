"""The adapter's command line -> validated :class:`Options` (docs/ARCHITECTURE.md, "The rank
command"), and the worker's argv (:func:`worker_argv`).

The flags are the ones ``mpilaunch/plan.py``'s ``rank_command`` renders (dashed spellings),
plus ``--scheduler-grace``. Everything that can be checked without the rank's identity is
checked here, with the rules of ``mpilaunch/contract.py`` (numbers: ``--flag=value: why;
fix``); a bad value is a :class:`UsageError`, one line, exit 2, nothing started.
"""
from __future__ import annotations

import os
import sys
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    from typing import List, Optional, Sequence

from mpilaunch import contract
from mpilaunch.errors import UsageError
from mpilaunch.rank import affinity, logs

PROG = "mpilaunch.rank"
DEFAULT_SCHEDULER_GRACE = "300"


# (flag, dest, default or STORE_TRUE, help); help None = not shown. The parser below and the
# fast path read this one table.
STORE_TRUE = object()
_FLAGS = (
    ("--log-dir", "log_dir", contract.DEFAULT_LOG_DIR,
     "directory for worker/scheduler logs (default .)"),
    ("--worker-log-name", "worker_log_name", logs.DEFAULT_WORKER_LOG_NAME,
     "worker log file name; {ip}, {hostname}, {rank} are replaced"),
    ("--tail-worker-log", "tail_worker_log", contract.DEFAULT_TAIL_SPEC,
     "ranks whose output also goes to the console: -1 (all), none, or 0,2,..."),
    ("--master-addr", "master_addr", None, "scheduler host (default: rank 0's)"),
    ("--master-port", "master_port", str(contract.DEFAULT_MASTER_PORT),
     f"scheduler port (default {contract.DEFAULT_MASTER_PORT}; 0 = pick a free one)"),
    ("--no-scheduler", "no_scheduler", STORE_TRUE, "do not start the MindSpore scheduler"),
    ("--cluster-time-out", "cluster_time_out", None, "MS_TOPO_TIMEOUT seconds (default 600)"),
    ("--bind-core", "bind_core", None,
     "True, False, or msrun's JSON dict {\"scheduler\":[\"0-1\"],\"device0\":[...]}"),
    ("--visible-devices", "visible_devices", None, "comma list: DEVICE_ID = list[local rank]"),
    ("--scheduler-grace", "scheduler_grace", DEFAULT_SCHEDULER_GRACE,
     "seconds rank 0 waits for the scheduler after its worker exits 0 "
     "(default 300: other nodes may still be finishing)"),
    ("--exec", "exec_", STORE_TRUE,
     "no MPI, scheduler or supervision: set the env and exec the script"),
    ("--no-python", "no_python", STORE_TRUE, "SCRIPT is an executable"),
    ("--python", "python", None, "interpreter for SCRIPT (default: this one)"),
    ("--module", "module", STORE_TRUE, "SCRIPT is a module name: run python -m SCRIPT [ARGS...]"),
    ("--no-port-check", "no_port_check", STORE_TRUE,
     "--exec: rank 0 does not check --master-port (the launcher chose it)"),
    # long jobs (issue 11): restart count, graceful stop, stall watchdog, span check
    ("--restart-count", "restart_count", None, None),
    ("--max-restarts", "max_restarts", None, None),
    ("--term-grace", "term_grace", None, None),
    ("--stall-timeout", "stall_timeout", None, None),
    ("--expect-ranks", "expect_ranks", None, None),
)
_BY_FLAG = {f[0]: f for f in _FLAGS}


def _parser():
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message):  # one line, no usage dump, no SystemExit(2) from argparse
            raise UsageError(message)

    p = _Parser(prog=PROG, description="Rank adapter: run SCRIPT as this MPI rank's worker "
                "(and, on rank 0, the framework scheduler) with MindSpore/PyTorch env set.",
                usage="%(prog)s [options] -- SCRIPT [ARGS...]")
    for flag, dest, default, text in _FLAGS:
        text = argparse.SUPPRESS if text is None else text
        if default is STORE_TRUE:
            p.add_argument(flag, action="store_true", dest=dest, help=text)
        else:
            p.add_argument(flag, dest=dest, default=default, help=text)
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _negative_number(value: str) -> bool:
    """argparse's ``^-\\d+$|^-\\d*\\.\\d+$`` (a value, not a flag), without importing re."""
    whole, dot, frac = value[1:].partition(".")
    if not dot:
        return whole.isdigit()
    return (whole == "" or whole.isdigit()) and frac.isdigit()


def _fast(argv: List[str]):
    """The namespace argparse would give for the launcher's own spelling (every flag exact,
    ``--flag value``, values not dash-led except negative numbers), else None. argparse and
    the ~8 ms of imports it brings (gettext, locale, shutil) then handle the rest."""
    from types import SimpleNamespace   # loaded at start-up already (enum imports it)

    ns = SimpleNamespace(**{dest: False if default is STORE_TRUE else default
                            for _, dest, default, _ in _FLAGS})
    i = 0
    while i < len(argv):
        entry = _BY_FLAG.get(argv[i])
        if entry is None:
            return None
        if entry[2] is STORE_TRUE:
            setattr(ns, entry[1], True)
            i += 1
            continue
        if i + 1 >= len(argv):
            return None
        value = argv[i + 1]
        if value.startswith("-") and not _negative_number(value):
            return None
        setattr(ns, entry[1], value)
        i += 2
    ns.command = []
    return ns


class Options(namedtuple("Options", "log_dir worker_log_name tail master_addr master_port "
                         "no_scheduler cluster_time_out bind visible_devices scheduler_grace "
                         "exec_ no_python python command module port_check longrun",
                         defaults=(None,))):
    """The adapter's validated options (a namedtuple: ``dataclasses`` costs every rank ~11 ms).

    tail: parsed ``--tail-worker-log`` (None = every rank, else a frozenset of ranks);
    master_port, cluster_time_out (None = not given): int; bind: parsed ``--bind-core``
    (None, ``affinity.AUTO`` or ``{key: [cpu, ...]}``); visible_devices: tuple or None;
    scheduler_grace: float; command: [SCRIPT, ARGS...] (``module``: SCRIPT is a module name);
    port_check: rank 0 checks --master-port (``--exec`` without a port the user gave: no);
    longrun: the issue-11 flags (:class:`mpilaunch.rank.longrun.LongRun`) or None."""

    __slots__ = ()


def parse_args(argv: Sequence[str], cpu_count: Optional[int] = None) -> Options:
    """Validated options; ``cpu_count`` (this host's, None = unchecked) bounds --bind-core."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        ns = _fast(argv[:i]) or _parser().parse_args(argv[:i])
        if ns.command:
            raise UsageError(f"unexpected argument {ns.command[0]!r} before '--'")
        command = argv[i + 1:]
    else:
        ns = _parser().parse_args(argv)
        command = ns.command
    if not command:
        raise UsageError("no SCRIPT given (usage: python -m mpilaunch.rank [options] -- SCRIPT [ARGS...])")
    grace = contract.seconds(ns.scheduler_grace, "--scheduler-grace", allow_zero=True)
    visible = None
    if ns.visible_devices is not None:
        visible = tuple(d.strip() for d in ns.visible_devices.split(","))
        if not any(visible):
            raise UsageError("--visible-devices is empty")
    if ns.master_addr is not None and not ns.master_addr.strip():
        raise UsageError("--master-addr is empty")
    master_port = contract.master_port(ns.master_port, "--master-port")
    cluster_time_out = (None if ns.cluster_time_out is None
                        else contract.whole(ns.cluster_time_out, "--cluster-time-out", 1))
    tail = contract.parse_tail_spec(ns.tail_worker_log, "--tail-worker-log")
    logs.check_log_name(ns.worker_log_name)
    bind = affinity.parse_bind_core(ns.bind_core, cpu_count)
    return Options(
        log_dir=ns.log_dir, worker_log_name=ns.worker_log_name, tail=tail,
        master_addr=ns.master_addr.strip() if ns.master_addr else None,
        master_port=master_port, no_scheduler=ns.no_scheduler,
        cluster_time_out=cluster_time_out, bind=bind, visible_devices=visible,
        scheduler_grace=grace, exec_=ns.exec_, no_python=ns.no_python, python=ns.python,
        command=command, module=ns.module, port_check=not ns.no_port_check,
        longrun=_longrun(ns))


def _longrun(ns):
    """The issue-11 flags (mpilaunch/rank/longrun.py), None when none was given."""
    if all(getattr(ns, n) is None for n in ("restart_count", "max_restarts", "term_grace",
                                            "stall_timeout", "expect_ranks")):
        return None
    from mpilaunch.rank import longrun

    return longrun.parse(ns)


def _which(name: str, path: Optional[str]) -> Optional[str]:
    """``shutil.which`` without importing shutil (~5 ms at every rank's start)."""
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    for d in (path if path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def worker_argv(opts: Options, env_path: Optional[str]) -> List[str]:
    """The worker's argv; UsageError if the script or interpreter cannot be found (looks at
    the file system: the one impure check of the options)."""
    script, args = opts.command[0], opts.command[1:]
    if opts.module and opts.no_python:
        raise UsageError("--module and --no-python exclude each other")
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
    if opts.module:
        return [found, "-m", script] + args
    if not script.startswith("-") and not os.path.isfile(script):
        raise UsageError(f"script {script!r} not found (cwd {os.getcwd()})")
    return [found, script] + args
