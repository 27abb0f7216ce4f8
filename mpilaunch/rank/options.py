"""The adapter's command line -> validated :class:`Options` (docs/ARCHITECTURE.md, "The rank
command"), and the worker's argv (:func:`worker_argv`).

The flags are the table of mpilaunch/rank/flags.py, which the launcher's rank command is
written from (mpilaunch/backends/rankcmd.py): the launcher's own spelling is parsed from it without
argparse, anything else by an argparse parser built from it. Everything that can be checked
without the rank's identity is checked here, with the rules of ``mpilaunch/contract.py``
(numbers: ``--flag=value: why; fix``); a bad value is a :class:`UsageError`, one line, exit 2,
nothing started.
"""
from __future__ import annotations

import os
import sys
from collections import namedtuple

TYPE_CHECKING = False  # typing is not imported at run time: every rank pays for each import
if TYPE_CHECKING:
    import argparse
    from types import SimpleNamespace
    from typing import (Dict, FrozenSet, List, NamedTuple, NoReturn, Optional, Protocol,
                        Sequence, Tuple, Union)

    from mpilaunch.rank.resilience import ResilienceFlags

    class _Parsed(Protocol):
        """The namespace argparse and _fast make of flags.FLAGS: a value flag's text as given,
        or its default (a str, or None where the table has none); a switch a bool."""
        log_dir: str; worker_log_name: str; tail_worker_log: str; master_port: str   # noqa: E702
        scheduler_grace: str; monitor_interval: str; master_addr: Optional[str]   # noqa: E702
        cluster_time_out: Optional[str]; bind_core: Optional[str]   # noqa: E702
        visible_devices: Optional[str]; bind_numa: Optional[str]   # noqa: E702
        rank_table_file: Optional[str]; run_id: Optional[str]; torchrun: Optional[str]   # noqa: E702
        python: Optional[str]; exec_: bool; no_scheduler: bool; no_port_check: bool   # noqa: E702
        no_python: bool; module: bool; command: List[str]   # noqa: E702
        restart_count: Optional[str]; max_restarts: Optional[str]; term_grace: Optional[str]   # noqa: E702
        stall_timeout: Optional[str]; expect_ranks: Optional[str]   # noqa: E702

    # The checker's view of the records below; at run time they are namedtuples (a test holds
    # the two to the same fields).
    class _Options(NamedTuple):
        log_dir: str; worker_log_name: str; tail: Optional[FrozenSet[int]]   # noqa: E702
        master_addr: Optional[str]; master_port: int; no_scheduler: bool   # noqa: E702
        cluster_time_out: Optional[int]   # bind: rank/binding/affinity.py's Spec (opt-in there)
        bind: Union[None, str, Dict[str, List[int]]]
        visible_devices: Optional[Tuple[str, ...]]; scheduler_grace: float   # noqa: E702
        exec_: bool; no_python: bool; python: Optional[str]; command: List[str]   # noqa: E702
        module: bool; port_check: bool   # noqa: E702
        resilience: Optional[ResilienceFlags] = None
        numa: Optional[str] = None
        sim_level: Optional[int] = None
        sim_rank_id: Optional[int] = None
        sim_world: Optional[int] = None
        rank_table_file: Optional[str] = None
        run_id: Optional[str] = None
        monitor: float = 0.0
        torchrun: Optional[Torchrun] = None

    class _Torchrun(NamedTuple):
        role: Optional[str]; signals: Optional[str]; redirects: Dict[int, int]   # noqa: E702
        filter: Optional[FrozenSet[int]]; vlr: bool   # noqa: E702
else:
    _Options = namedtuple("Options", "log_dir worker_log_name tail master_addr master_port "
                          "no_scheduler cluster_time_out bind visible_devices scheduler_grace "
                          "exec_ no_python python command module port_check resilience "
                          "numa sim_level sim_rank_id sim_world rank_table_file run_id monitor "
                          "torchrun",
                          defaults=(None, None, None, None, None, None, None, 0.0, None))
    _Torchrun = namedtuple("Torchrun", "role signals redirects filter vlr")

from mpilaunch import contract
from mpilaunch.errors import UsageError
from mpilaunch.rank import flags, frameworkenv, logs   # affinity: only with --bind-core/--bind-numa

PROG = "mpilaunch.rank"


def _parser() -> argparse.ArgumentParser:
    import argparse

    class _Parser(argparse.ArgumentParser):
        def error(self, message: str) -> "NoReturn":  # one line, no usage dump, no SystemExit(2) from argparse
            raise UsageError(message)

    p = _Parser(prog=PROG, description="Rank adapter: run SCRIPT as this MPI rank's worker "
                "(and, on rank 0, the framework scheduler) with MindSpore/PyTorch env set.",
                usage="%(prog)s [options] -- SCRIPT [ARGS...]")
    for f in flags.FLAGS:
        if f.kind == flags.SWITCH:
            p.add_argument(f.name, action="store_true", dest=f.dest, help=f.help)
        else:
            p.add_argument(f.name, dest=f.dest, default=f.default, metavar=f.metavar,
                           help=f"{f.help} (default {f.default})" if f.default else f.help)
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def _negative_number(value: str) -> bool:
    """argparse's ``^-\\d+$|^-\\d*\\.\\d+$`` (a value, not a flag), without importing re."""
    whole, dot, frac = value[1:].partition(".")
    if not dot:
        return whole.isdigit()
    return (whole == "" or whole.isdigit()) and frac.isdigit()


def _fast(argv: List[str]) -> Optional[SimpleNamespace]:
    """The namespace argparse would give for the launcher's own spelling (every flag exact,
    ``--flag value``, values not dash-led except negative numbers), else None. argparse and
    its imports (docs/ARCHITECTURE.md, start-up) then handle the rest."""
    from types import SimpleNamespace   # loaded at start-up already (enum imports it)

    ns = SimpleNamespace(**{f.dest: f.default for f in flags.FLAGS})
    by_name = flags.BY_NAME
    i = 0
    while i < len(argv):
        f = by_name.get(argv[i])
        if f is None:
            return None
        if f.kind == flags.SWITCH:
            setattr(ns, f.dest, True)
            i += 1
            continue
        if i + 1 >= len(argv):
            return None
        value = argv[i + 1]
        if value.startswith("-") and not _negative_number(value):
            return None
        setattr(ns, f.dest, value)
        i += 2
    ns.command = []
    return ns


class Options(_Options):
    """The adapter's validated options (a namedtuple: docs/ARCHITECTURE.md, start-up).

    tail: parsed ``--tail-worker-log`` (None = every rank, else a frozenset of ranks);
    master_port, cluster_time_out (None = not given): int; bind: parsed ``--bind-core``
    (None, ``affinity.AUTO`` or ``{key: [cpu, ...]}``); visible_devices: tuple or None;
    scheduler_grace: float; command: [SCRIPT, ARGS...] (``module``: SCRIPT is a module name);
    port_check: rank 0 checks --master-port (``--exec`` without a port the user gave: no);
    resilience: the flags each attempt writes (:class:`mpilaunch.rank.resilience.ResilienceFlags`) or None;
    numa: ``--bind-numa`` as given (checked; rank/binding/numabind.py reads it again in the child);
    sim_level, sim_rank_id, sim_world: int or None; rank_table_file: str or None; run_id: the
    job's id (``--run-id``) or None; monitor: ``--monitor-interval`` in seconds, 0 = off
    (rank/monitor.py); torchrun: ``--torchrun`` parsed (:class:`Torchrun`) or None."""

    __slots__ = ()


def parse_args(argv: Sequence[str], cpu_count: Optional[int] = None) -> Options:
    """Validated options; ``cpu_count`` (this host's, None = unchecked) bounds --bind-core."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        ns: _Parsed = _fast(argv[:i]) or _parser().parse_args(argv[:i])
        if ns.command:
            raise UsageError(f"unexpected argument {ns.command[0]!r} before '--'")
        command = argv[i + 1:]
    else:
        ns = _parser().parse_args(argv)
        command = ns.command
    if not command:
        raise UsageError("no SCRIPT given (usage: python -m mpilaunch.rank [options] -- SCRIPT [ARGS...])")
    grace = contract.seconds(ns.scheduler_grace, "--scheduler-grace", allow_zero=True)
    visible = (None if ns.visible_devices is None   # the one rule, the launcher checks it too
               else frameworkenv.parse_devices(ns.visible_devices, "--visible-devices"))
    if ns.master_addr is not None and not ns.master_addr.strip():
        raise UsageError("--master-addr is empty")
    master_port = contract.master_port(ns.master_port, "--master-port")
    cluster_time_out = (None if ns.cluster_time_out is None
                        else contract.whole(ns.cluster_time_out, "--cluster-time-out", 1))
    tail = contract.parse_tail_spec(ns.tail_worker_log, "--tail-worker-log")
    logs.check_log_name(ns.worker_log_name)
    bind = None
    if ns.bind_core is not None or ns.bind_numa is not None:
        from mpilaunch.rank.binding import affinity   # 23 KB of code every other rank need not load

        bind = affinity.parse_bind_core(ns.bind_core, cpu_count)
        if ns.bind_numa is not None:
            affinity.parse_bind_numa(ns.bind_numa)
    sim = [None if getattr(ns, d) is None else contract.whole(getattr(ns, d), f, lo)
           for d, f, lo in (("sim_level", "--sim-level", 0), ("sim_rank_id", "--sim-rank-id", 0),
                            ("sim_world", "--sim-world", 1))]
    return Options(
        numa=ns.bind_numa, sim_level=sim[0], sim_rank_id=sim[1], sim_world=sim[2],
        rank_table_file=ns.rank_table_file, run_id=ns.run_id,
        torchrun=None if ns.torchrun is None else parse_torchrun(ns.torchrun),
        monitor=contract.seconds(ns.monitor_interval, "--monitor-interval", allow_zero=True),
        log_dir=ns.log_dir, worker_log_name=ns.worker_log_name, tail=tail,
        master_addr=ns.master_addr.strip() if ns.master_addr else None,
        master_port=master_port, no_scheduler=ns.no_scheduler,
        cluster_time_out=cluster_time_out, bind=bind, visible_devices=visible,
        scheduler_grace=grace, exec_=ns.exec_, no_python=ns.no_python, python=ns.python,
        command=command, module=ns.module, port_check=not ns.no_port_check,
        resilience=_resilience(ns))


class Torchrun(_Torchrun):
    """torchrun's per-worker flags (``--torchrun``): role: ROLE_NAME or None; signals:
    TORCHELASTIC_SIGNALS_TO_HANDLE or None; redirects: {local rank: N} (-1: every local rank)
    where N (1 stdout, 2 stderr, 3 both) stays out of the console; filter: the local ranks on
    the console (None: every one); vlr: --virtual-local-rank."""

    __slots__ = ()

    def hidden(self, local_rank: int) -> int:
        """The streams of ``local_rank``'s worker kept off the console: 0, 1, 2 or 3."""
        if self.filter is not None and local_rank not in self.filter:
            return 3
        return self.redirects.get(local_rank, self.redirects.get(-1, 0))


def parse_torchrun(text: str) -> Torchrun:
    """``role=NAME;signals=LIST;redirects=N|L:N,...;filter=L,...;vlr=1`` (any of them)."""
    got = {}
    for part in text.split(";"):
        key, eq, value = part.partition("=")
        if not eq or key not in Torchrun._fields or key in got:
            raise UsageError(f"--torchrun={text!r}: {part!r} is not one of "
                             "role=, signals=, redirects=, filter=, vlr=")
        got[key] = value
    redirects = {}
    for item in got.get("redirects", "").split(","):
        if not item:
            continue
        local, colon, n = item.rpartition(":")
        redirects[contract.whole(local, "--torchrun redirects", 0) if colon else -1] = \
            contract.whole(n, "--torchrun redirects", 0, 3)
    keep = got.get("filter")
    return Torchrun(got.get("role") or None, got.get("signals") or None, redirects,
                    None if keep is None else frozenset(contract.whole(r, "--torchrun filter", 0)
                                                         for r in keep.split(",")),
                    got.get("vlr") == "1")


def _resilience(ns: _Parsed) -> Optional[ResilienceFlags]:
    """The resilience flags (restart count, graceful stop, stall watchdog, span check: the rows
    each attempt writes, read by mpilaunch/rank/resilience.py), None when none was given."""
    if all(getattr(ns, f.dest) is None for f in flags.FLAGS if f.writer == flags.ATTEMPT):
        return None
    from mpilaunch.rank import resilience

    return resilience.parse(ns)


def worker_argv(opts: Options, env_path: Optional[str]) -> List[str]:
    """The worker's argv; UsageError if the script or interpreter cannot be found (looks at
    the file system: the one impure check of the options)."""
    script, args = opts.command[0], opts.command[1:]
    if opts.module and opts.no_python:
        raise UsageError("--module and --no-python exclude each other")
    if opts.no_python:
        if opts.python:
            raise UsageError("--python and --no-python exclude each other")
        found = contract.which(script, path=env_path)
        if found is None:
            raise UsageError(f"executable {script!r} not found (--no-python)")
        return [script] + args
    python = opts.python or sys.executable
    found = contract.which(python, path=env_path)
    if found is None:
        raise UsageError(f"--python {python!r} is not an executable")
    if opts.module:
        return [found, "-m", script] + args
    if not script.startswith("-") and not os.path.isfile(script):
        raise UsageError(f"script {script!r} not found (cwd {os.getcwd()})")
    return [found, script] + args
