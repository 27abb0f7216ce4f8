"""LaunchPlan: everything decided, nothing done. ``make_plan`` and ``argv`` are pure."""
from __future__ import annotations

import os
from collections import namedtuple
from typing import List, Mapping

from mpilaunch import hostfile as hf
from mpilaunch import hydra, render, tune
from mpilaunch.config import LaunchConfig
from mpilaunch.errors import UsageError
from mpilaunch.mpi import OMPI4, MpiInfo
from mpilaunch.rankcmd import rank_command

SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/local/bin")
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class LaunchPlan(namedtuple("LaunchPlan", "mpi hosts np oversubscribe run_as_root ssh broadcast args dropped_x hostfile_path tune_path rank_command extra_env noprefix stdin scheduler", defaults=({}, False, None, None))):
    """mpi: MpiInfo;
    hosts: Tuple[hf.Host, ...];
    np: int;
    oversubscribe: bool;
    run_as_root: bool;
    ssh: Tuple[str, ...] # mpirun tokens carrying the ssh options;
    broadcast: tune.Broadcast;
    args: Tuple[str, ...] # bind + x + mca + extra, normalised for this dialect;
    dropped_x: Tuple[str, ...] # '-x NAME' removed because NAME is unset;
    hostfile_path: str;
    tune_path: str;
    rank_command: Tuple[str, ...];
    extra_env: Mapping[str, str] # values moved out of argv (secrets);
    noprefix: bool # Open MPI 4 by absolute path acts as --prefix: PATH gets its bin first.
    stdin: mpirun's --stdin target: a rank, all, none; None: rank 0, or none when the launcher's
        stdin is closed or /dev/null (launcher.stdin_target; neither is written);
    scheduler: (started on rank 0: bool, why: str) or None, for the failure summary.
    (A namedtuple: ``dataclasses`` costs ~12 ms of start-up at every launch.)"""

    __slots__ = ()

    @property
    def hostfile_text(self) -> str:
        if self.mpi.hydra:
            return hydra.render_hostfile(self.hosts)
        return hf.render_hostfile(self.hosts)

    @property
    def tune_text(self) -> str:
        return tune.render(self.broadcast)


def make_plan(cfg: LaunchConfig, env: Mapping[str, str], mpi: MpiInfo, run_dir: str, euid: int) -> LaunchPlan:
    if mpi.hydra:   # MPICH / Intel MPI: mpilaunch/hydra.py
        return LaunchPlan(**hydra.plan_fields(cfg, env, mpi, run_dir), rank_command=tuple(rank_command(cfg)),
                          stdin=cfg.stdin, scheduler=(cfg.scheduler, cfg.scheduler_why))
    dialect = mpi.dialect
    tokens: List[str] = []
    for setting in (cfg.bind_args, cfg.x_args, cfg.mca_args, cfg.extra_args):
        raw = render.split_arg_string(str(setting.value), setting.source)
        tokens += render.normalize(raw, dialect, setting.source)
    imported = cfg.tune_import
    if imported is not None:
        tokens += render.normalize(list(imported.x_tokens) + list(imported.mca_tokens), dialect,
                                   imported.path)
    tokens, dropped = render.drop_unset_x(tokens, env)
    tokens, moved = render.route_secret_x(tokens)

    ssh_args: List[str] = []
    if cfg.ssh_port is not None:
        ssh_args += ["-p", str(cfg.ssh_port)]
    ssh_args += list(cfg.ssh_extra)
    if ssh_args and render.has_param(tokens, ("plm_rsh_args", "plm_ssh_args")):
        raise UsageError(
            "the ssh options are given twice: SSHD_PORT/--ssh-port/--ssh-args and a "
            "plm_rsh_args in the MCA/extra args; keep one"
        )

    if any(h.name not in LOCAL_NAMES for h in cfg.hosts):
        tokens += render.keepalive_tokens(dialect, tokens)

    selected = dict(tune.select(env, cfg.env_prefixes))
    if imported is not None:
        from mpilaunch import tuneimport

        for name, value in tuneimport.selected(imported, env):
            selected[name] = value
            if name not in env:   # only in the file: mpirun's env must carry it for -x NAME
                moved = {**moved, name: value}
    broadcast = tune.split(sorted(selected.items()))
    tune_path = cfg.tune_path or os.path.join(run_dir, "tune.env")
    return LaunchPlan(
        mpi=mpi,
        hosts=cfg.hosts,
        np=cfg.np,
        oversubscribe=cfg.oversubscribe,
        run_as_root=(euid == 0),
        ssh=tuple(render.ssh_tokens(ssh_args, dialect)),
        broadcast=broadcast,
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
    )


def argv(plan: LaunchPlan) -> List[str]:
    """The exact mpirun command: the ModelArts shape, in this Open MPI's dialect."""
    if plan.mpi.hydra:
        return hydra.argv(plan.mpi.path, plan.np, plan.hostfile_path, plan.ssh, plan.args,
                          plan.broadcast.routed, plan.rank_command, plan.mpi.dialect, plan.stdin)
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
