"""``mpilaunch check [launcher options] [SCRIPT ...]``: preflight a multi-node launch.

Takes the launcher's own options and builds the same ``LaunchConfig`` (``launchconfig.build``), so
the hosts, np, ssh port and ssh options checked are exactly those a launch would use. Exit
status: 0 nothing failed (warnings allowed), 1 a check failed (with ``--deep``: or a host is an
outlier, mpilaunch/check/deep.py), 2 usage error.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Sequence

import mpilaunch
from mpilaunch import contract, rundir
from mpilaunch.check.hosts import run_checks
from mpilaunch.check.report import report_lines
from mpilaunch.check.results import LEVEL_FULL, LEVEL_SSH, failed, params_from_config
from mpilaunch.config import allocation, launchconfig, mpi, options
from mpilaunch.errors import UsageError


def main(argv: Sequence[str]) -> int:
    args = options.parser(options.CHECK).parse_args(list(argv))
    env = dict(os.environ)
    timeout = contract.seconds(*options.setting(args, env, "check_timeout"))
    parallel = contract.whole(*options.setting(args, env, "check_parallel"), 1)
    script_given = args.script is not None
    if not script_given:      # the launcher's config wants a script; a check does not
        args.script, args.no_python, args.script_args = "true", True, []
    user_oversubscribe = bool(args.oversubscribe)
    args.oversubscribe = True  # np > slots is reported as the 'slots' check, not a usage error
    cfg = launchconfig.build(args, env)
    deep = cfg.deep
    if deep is not None and (args.check_ssh_only or allocation.from_slurm(cfg.hosts_from)):
        raise UsageError("--deep: not with --ssh-only, nor inside a Slurm allocation (its "
                         "agents are started over ssh); run it from a login to the hosts")
    level = LEVEL_SSH if args.check_ssh_only else LEVEL_FULL
    info = mpi.detect(cfg.mpirun, env) if level == LEVEL_FULL else None
    p = params_from_config(cfg, level=level, mpi_info=info, oversubscribe=user_oversubscribe,
                           check_script=script_given)
    what = f"{len(p.hosts)} host(s) from {cfg.hosts_source}, np {p.np}, python {p.python}"
    if info is not None:
        what += f", {info.name} ({info.path})"
    print(f"mpilaunch check: {what}, mpilaunch {mpilaunch.__version__}, time-out {timeout:g}s per check",
          flush=True)

    for path in rundir.reclaim_stale():   # files of launchers that died by SIGKILL
        print(f"mpilaunch check: removed {path} (its launcher is gone)", flush=True)
    t0 = time.monotonic()
    report = None
    if allocation.from_slurm(cfg.hosts_from):   # the allocation, not ssh (check/slurm.py)
        from mpilaunch.check import slurm

        results = slurm.run_checks(p, env, timeout, parallel=parallel)
    elif deep is not None:
        from mpilaunch.check import deep as deep_check

        results, report = deep_check.check_deep(p, deep, cfg.log_dir, timeout, parallel)
    else:
        results = run_checks(p, timeout, parallel=parallel)
    for line in report_lines(results, len(p.hosts), time.monotonic() - t0,
                             table=True if args.check_table else None, deep=report):
        print(line)
    sys.stdout.flush()
    return 1 if failed(results) else 0
