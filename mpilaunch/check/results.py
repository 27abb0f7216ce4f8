"""What ``mpilaunch check`` checks (:class:`Params`) and what it finds (:class:`CheckResult`),
plus the one job-wide check (:func:`check_slots`). Pure."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, List, Optional, Tuple

from mpilaunch.config import hostfile as hf
from mpilaunch.config import options

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.config.mpi import MpiInfo

# Defaults of ``--timeout`` / ``--parallel``: the option table's.
DEFAULT_TIMEOUT = float(options.BY_DEST["check_timeout"].default)
DEFAULT_PARALLEL = int(options.BY_DEST["check_parallel"].default)

OK, FAIL, WARN, SKIP = "ok", "fail", "warn", "skip"
LEVEL_SSH, LEVEL_FULL = "ssh", "full"

# Column order of the table (and of checks per host); the first three are the ssh level.
CHECKS = ("resolve", "ssh-port", "ssh", "node", "srun", "python", "mpilaunch", "mpi4py", "mpirun",
          "script", "sched-port", "somaxconn", "syn-backlog")
SSH_CHECKS = CHECKS[:3]
SLURM_CHECKS = ("node", "srun")     # inside a Slurm job, instead of the ssh ones (check/slurm.py)


@dataclass(frozen=True)
class CheckResult:
    """One check on one host (``host == ""`` for job-wide checks such as ``slots``)."""
    host: str
    addr: str
    check: str
    status: str          # ok | fail | warn | skip
    message: str = ""    # for fail/warn: what is wrong -- and the fix
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != FAIL

    @property
    def label(self) -> str:
        if not self.host:
            return "job"
        if self.addr and self.addr != self.host:
            return f"{self.host} ({self.addr})"
        return self.host

    def line(self) -> str:
        return f"{self.label}: {self.message}"


@dataclass(frozen=True)
class Params:
    """What to check. :func:`params_from_config` derives it from a ``LaunchConfig``."""
    hosts: Tuple[hf.Host, ...]
    np: int
    ssh_port: Optional[int] = None
    ssh_extra: Tuple[str, ...] = ()
    python: str = sys.executable
    level: str = LEVEL_FULL
    mpirun: Optional[str] = None                    # absolute path (full level)
    mpi_version: Optional[Tuple[int, ...]] = None   # this host's, to compare with
    master_port: int = 0                            # 0 = not checked
    script: Optional[str] = None                    # absolute path checked on every host
    oversubscribe: bool = False
    hosts_source: str = "the hostfile"
    np_source: str = "np"
    port_source: str = "SSHD_PORT/--ssh-port"
    ssh_mux: Optional[str] = None                   # ControlPath: the login opens a master


def params_from_config(cfg: LaunchConfig, level: str = LEVEL_SSH, mpi_info: Optional[MpiInfo] = None,
                       oversubscribe: Optional[bool] = None,
                       check_script: bool = False) -> Params:
    """A ``mpilaunch.config.launchconfig.LaunchConfig`` (+ ``mpilaunch.config.mpi.MpiInfo`` for the full level)."""
    script = None
    if check_script and cfg.script:
        if not cfg.no_python:
            script = os.path.abspath(cfg.script)
        elif os.path.isabs(cfg.script):
            script = cfg.script
    return Params(
        hosts=tuple(cfg.hosts), np=cfg.np, ssh_port=cfg.ssh_port, ssh_extra=tuple(cfg.ssh_extra),
        python=cfg.python, level=level,
        mpirun=mpi_info.path if mpi_info is not None else None,
        mpi_version=tuple(mpi_info.version) if mpi_info is not None else None,
        master_port=cfg.master_port,
        script=script,
        oversubscribe=cfg.oversubscribe if oversubscribe is None else oversubscribe,
        hosts_source=cfg.hosts_source, np_source=cfg.np_source,
    )


def check_slots(p: Params) -> CheckResult:
    """The job-wide check: the hosts' slots cover np (unless oversubscribing)."""
    slots = hf.total_slots(p.hosts)
    if p.np <= slots or p.oversubscribe:
        note = f"np {p.np} on {slots} slot(s)" + (" (oversubscribed)" if p.np > slots else "")
        return CheckResult("", "", "slots", OK, note)
    per_host = ", ".join(f"{h.name}: {h.slots}" for h in p.hosts[:8])
    if len(p.hosts) > 8:
        per_host += f", ... ({len(p.hosts)} hosts)"
    return CheckResult(
        "", "", "slots", FAIL,
        f"np {p.np} (from {p.np_source}) is more than the {slots} slot(s) of {p.hosts_source} "
        f"({per_host}) — lower np, add slots= to the hostfile (MA_NUM_GPUS / --local_worker_num), "
        "or pass --oversubscribe")


def skip_rest(host: str, addr: str, after: str, level: str) -> List[CheckResult]:
    """``skip`` results for the checks of ``level`` that come after the failed ``after``."""
    names = [c for c in (CHECKS if level == LEVEL_FULL else SSH_CHECKS) if c not in SLURM_CHECKS]
    return [CheckResult(host, addr, c, SKIP) for c in names[names.index(after) + 1:]]


def failed(results: Iterable[CheckResult]) -> List[CheckResult]:
    return [r for r in results if r.status == FAIL]

