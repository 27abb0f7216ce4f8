"""Open MPI's mpirun (4.x, 5.x): the launch in its words, and what its output says.

The ModelArts command shape: ``mpirun -np N --hostfile F [ssh] --tune T [OPENMPI_* args]
[-x NAME ...] RANK_COMMAND``, in the dialect of the Open MPI found (``mpiargs.py`` spells the
user's OPENMPI_* strings for it; ``broadcast.py`` decides what the tune file carries). Open MPI ends
the job at a rank's failure and reports lost daemons itself; killed, Open MPI 5 leaves its
session dir behind (docs/OPENMPI_FACTS.md section 9), which :meth:`OpenMpi.cleanup` removes.
"""
from __future__ import annotations

import os
import re
import signal
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Tuple

from mpilaunch import contract, net, rundir
from mpilaunch.backends.base import (SSH_CLOSED, Backend, LaunchPlan, find_all, plan_facts, show_files,
                                    with_routed)
from mpilaunch.backends.rankcmd import rank_command
from mpilaunch.config import broadcast
from mpilaunch.config import hostfile as hf
from mpilaunch.config import mpiargs, sshconfig
from mpilaunch.config.mpi import OMPI4, MpiInfo
from mpilaunch.output import events
from mpilaunch.output.summary import Collector, Event

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig

SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")

# Open MPI's messages: (a literal each match holds, the pattern), read by base.find_all.
# Open MPI wraps this notice at any space ("exited on\nsignal 9" on 5.x): match any whitespace.
_MPIRUN_NOTICE = ("noticed", r"noticed\s+that\s+process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+"
                  r"node\s+(\S+?)\.?\s+exited\s+on\s+signal\s+(\d+)")
# Open MPI's own report of the first process that failed, for processes that send no status
# line (``--exec``: the MPI program runs without an adapter). 4.1: ``Process name: [[J,1],R]``;
# 5.x: ``Process name: [prterun-HOST-PID@1,R]``; both followed by ``Exit code: N``.
_MPI_FAILED = ("Process", r"Process\s+name:\s*\[(?:\[\d+,\d+\],(\d+)|prterun-(\S+)-\d+@\d+,(\d+))\]\s*"
               r"Exit\s+code:\s*(\d+)")
# MPI_Abort: 5.x names rank and node; the Errorcode comes from MPI_ABORT's own notice.
_MPI_ABORT_NODE = ("exited", r"exited\s+due\s+to\s+process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+"
                   r"node\s+(\S+?)\s+calling\s+\"abort\"")
_MPI_ABORT_CODE = ("MPI_ABORT", r"(?s)MPI_ABORT\s+was\s+invoked\s+on\s+rank\s+(\d+)\s.*?Errorcode:\s*(\d+)")
# Open MPI's words for a host whose daemon is gone (crashed, powered off, link down).
_LOST_HOST = [
    ("has lost communication with a remote daemon",
     r"(?s)(?:ORTE|PRTE) has lost communication with a remote daemon.*?Remote daemon:\s*\S+ on node (\S+)"),
    ("A daemon failed to report back", r"(?s)A daemon failed to report back.*?Remote host:\s+(\S+)"),
    SSH_CLOSED,
]
# A daemon that did not report back (5.x names the host, 4.1 does not). 5.x says the same of
# a daemon whose ssh ended mid-job (a link down): a start failure is one before any rank ran,
# since Open MPI starts the ranks only once every daemon has reported.
# Read after a failed launch only (re.search's cache compiles it then).
_START_FAILED = (r"A daemon failed to report back|unable to reliably start one or more daemons|"
                 r"failed after launch and before communicating back")




class OpenMpi(Backend[LaunchPlan]):
    program = "mpirun"
    lost_why = "Open MPI lost its daemon there"
    # to each rank's process group, 4.1 and 5 alike (docs/OPENMPI_FACTS.md section 16)
    forwards = frozenset((signal.SIGUSR1, signal.SIGUSR2, signal.SIGTSTP, signal.SIGCONT))
    #: no ssh preflight before the launch: a failed daemon start is explained after it (run.py)
    explains_start = True

    def __init__(self, mpi: MpiInfo) -> None:
        super().__init__(mpi)
        self.mpi: MpiInfo = mpi

    def plan(self, cfg: LaunchConfig, env: Mapping[str, str], run_dir: str, euid: int) -> LaunchPlan:
        return make_plan(cfg, env, self.mpi, run_dir, euid, cpus=len(os.sched_getaffinity(0)))

    def argv(self, plan: LaunchPlan) -> List[str]:
        return argv(plan)

    def with_control(self, plan: LaunchPlan, names: Sequence[str]) -> LaunchPlan:
        return with_routed(plan, names)

    def files(self, plan: LaunchPlan) -> List[Tuple[str, str]]:
        return [(plan.hostfile_path, hf.render_hostfile(plan.hosts)),
                (plan.tune_path, broadcast.render(plan.broadcast))] + ([plan.ssh_config] if plan.ssh_config else [])

    def show(self, plan: LaunchPlan, env: Mapping[str, str]) -> None:
        show(plan, env, self.files(plan))

    def notices(self, text: str) -> List[Event]:
        return notices(text) + reports(text)

    def lost_hosts(self, text: str) -> List[str]:
        found = []
        for words in _LOST_HOST:
            for m in find_all(words, text):
                found.append((m.start(), m.group(1).rstrip(".,")))
        return [h for _, h in sorted(found)]

    def after(self, plan: LaunchPlan, collector: Collector, status: int) -> None:
        """A daemon did not start (mpirun's words, and no rank reported anything): the
        preflight's ssh checks, run now over every host in parallel, name each host that fails
        and the fix (``collector.not_started``; those hosts count as lost: exit 255). Only when
        the checks were left for after the start (``plan.start_checks``: base.explains_own_start)."""
        checks = plan.start_checks
        if (checks is None or collector.ranks_seen or collector.events
                or not re.search(_START_FAILED, collector.text)):
            return
        from mpilaunch import check

        events.preflight_start()   # the event record: the checks' per-host records, as a preflight's
        results = events.preflight(check.run_checks(checks, timeout=check.DEFAULT_TIMEOUT))
        bad = [r for r in check.failed(results) if r.host]
        collector.not_started = bad
        collector.unreachable += [r.host for r in bad if r.host not in collector.unreachable]

    def cleanup(self, pid: int, returncode: int) -> None:
        if returncode < 0:
            rundir.drop_session_dir(pid)   # a killed mpirun leaves it behind


def make_plan(cfg: LaunchConfig, env: Mapping[str, str], mpi: MpiInfo, run_dir: str,
              euid: int, cpus: Optional[int] = None) -> LaunchPlan:
    """LaunchConfig + environment -> the plan of an Open MPI launch (pure); ``cpus``: the CPUs
    this launch may use, when every rank runs here."""
    dialect = mpi.dialect
    tokens: List[str] = []
    for piece in cfg.mpi_pieces:
        tokens += mpiargs.normalize(piece.tokens, dialect, piece.source)
    tokens, dropped = mpiargs.drop_unset_x(tokens, env)
    tokens, moved = mpiargs.route_secret_x(tokens)

    # given twice (here and in the pieces) is refused where the configuration is built
    ssh_args = sshconfig.mpi_ssh_args(cfg, run_dir)   # a port per host: the job's ssh config


    if not net.all_here(cfg.hosts):   # daemons on other hosts
        restarts = cfg.resilience.max_restarts if cfg.resilience is not None else 0
        tokens += mpiargs.keepalive_tokens(dialect, tokens, fast=restarts > 0)
    elif cpus is not None and cfg.np > cpus:
        tokens += mpiargs.yield_tokens(tokens, env)

    selected, only_in_file = broadcast.selection(env, cfg.env_prefixes, cfg.tune_import)
    moved = {**moved, **only_in_file}
    bcast = broadcast.split(sorted(selected.items()))
    tune_path = cfg.tune_path or os.path.join(run_dir, "tune.env")
    return LaunchPlan(
        mpi=mpi,
        hosts=cfg.hosts,
        np=cfg.np,
        oversubscribe=cfg.oversubscribe,
        run_as_root=(euid == 0),
        ssh=tuple(mpiargs.ssh_tokens(ssh_args, dialect)),
        broadcast=bcast,
        args=tuple(tokens),
        dropped_x=tuple(dropped),
        hostfile_path=os.path.join(run_dir, "hostfile"),
        tune_path=tune_path,
        rank_command=tuple(rank_command(cfg)),
        extra_env=moved,
        # /usr/bin/mpirun (4.x) would put /usr/bin first on every rank's PATH, so PATH would not
        # arrive as sent; a system prefix is on the default PATH anyway, so drop the behaviour.
        noprefix=(dialect == OMPI4 and os.path.dirname(mpi.path) in SYSTEM_BIN_DIRS),
        stdin=cfg.stdin,
        scheduler=(cfg.scheduler, cfg.scheduler_why),
        ssh_config=sshconfig.job_file(cfg, run_dir),
        **plan_facts(cfg),
    )


def argv(plan: LaunchPlan) -> List[str]:
    """The exact mpirun command: the ModelArts shape, in this Open MPI's dialect."""
    cmd = [plan.mpi.path]
    if plan.noprefix:
        cmd.append("--noprefix")
    cmd += ["-np", str(plan.np), "--hostfile", plan.hostfile_path]
    cmd += list(plan.ssh)
    cmd += ["--tune", plan.tune_path]
    cmd += list(plan.args)
    for name in plan.broadcast.routed:
        cmd += ["-x", name]
    if plan.stdin not in (None, "0"):   # same spelling in 4.1 and 5.x: --stdin RANK|all|none
        cmd += ["--stdin", plan.stdin]
    if plan.oversubscribe:
        cmd.append("--oversubscribe")
    if plan.run_as_root:
        cmd.append("--allow-run-as-root")
    cmd += list(plan.rank_command)
    return cmd


def show(plan: LaunchPlan, env: Mapping[str, str], files: Sequence[Tuple[str, str]]) -> None:
    """``--dry-run``: the exact argv, hostfile and tune file, secrets masked."""
    cmd = argv(plan)
    shown = []
    for i, tok in enumerate(cmd):
        if i > 0 and cmd[i - 1] == "-x" and "=" in tok:
            name, _, value = tok.partition("=")
            tok = f"{name}={contract.mask_value(name, value)}"
        shown.append(tok)
    print(f"# mpirun: {plan.mpi.path} ({plan.mpi.name})")
    print(mpiargs.show(shown))
    show_files(plan, env, files, "mpirun's environment (-x NAME)")


def notices(text: str) -> list:
    """mpirun's "noticed that process rank N ... exited on signal S" (an adapter killed)."""
    out = []
    for m in find_all(_MPIRUN_NOTICE, text):
        sig = int(m.group(4))
        out.append(Event(int(m.group(1)), m.group(3), "rank", "exit", 128 + sig, sig,
                         "self", None, [], float("inf")))
    return out


def reports(text: str) -> list:
    """Open MPI's own report of a failed process (exit code, or MPI_Abort): ``--exec``."""
    out = []
    for m in find_all(_MPI_FAILED, text):
        rank = int(m.group(1) if m.group(1) is not None else m.group(3))
        out.append(Event(rank, m.group(2) or "?", "process", "exit", int(m.group(4)), None,
                         "self", None, [], float("inf")))
    codes = {int(m.group(1)): int(m.group(2)) for m in find_all(_MPI_ABORT_CODE, text)}
    for m in find_all(_MPI_ABORT_NODE, text):
        rank = int(m.group(1))
        out.append(Event(rank, m.group(2), "process", "exit", codes.pop(rank, None), None, "self",
                         None, [], float("inf"), message="the process called MPI_Abort"))
    for rank, code in codes.items():
        out.append(Event(rank, "?", "process", "exit", code, None, "self", None, [], float("inf"),
                         message="the process called MPI_Abort"))
    return out
