"""``mpilaunch [run] [options] SCRIPT [ARGS...]``: options -> config -> plan -> launcher.

Also the library entry of ``mpilaunch job`` (worker-0 runs exactly this)."""
from __future__ import annotations

import os
import sys
from typing import Sequence

from mpilaunch import contract


def show_plan(plan, env) -> None:
    """``--dry-run``: the exact argv, hostfile and tune file, secrets masked."""
    from mpilaunch import plan as planmod
    from mpilaunch import render

    cmd = planmod.argv(plan)
    shown = []
    for i, tok in enumerate(cmd):
        if i > 0 and cmd[i - 1] == "-x" and "=" in tok:
            name, _, value = tok.partition("=")
            tok = f"{name}={contract.mask_value(name, value)}"
        shown.append(tok)
    print(f"# mpirun: {plan.mpi.path} ({plan.mpi.name})")
    print(render.show(shown))
    print(f"# hostfile {plan.hostfile_path}:")
    sys.stdout.write("".join(f"#   {line}\n" for line in plan.hostfile_text.splitlines()))
    print(f"# tune file {plan.tune_path}:")
    sys.stdout.write("".join(f"#   {line}\n" for line in plan.tune_text.splitlines()))
    if plan.broadcast.routed:
        print("# carried in mpirun's environment (-x NAME): " + ", ".join(
            f"{n}={contract.MASK}" if contract.is_secret(n) else f"{n}={env[n]!r}"
            for n in plan.broadcast.routed))
    if plan.dropped_x:
        print("# dropped (unset here): " + " ".join(f"-x {n}" for n in plan.dropped_x))


def preflight_fails(cfg, mux=None) -> bool:
    """Before a multi-host launch: every host resolves, its ssh port answers, ssh logs in
    without a prompt. One line per failure naming the host, instead of Open MPI's
    "daemon failed to report back" after its own time-out. ``mux``: a ControlPath where each
    login leaves its connection open for mpirun's ssh (mpilaunch/ssh.py, issue 13 goal 3)."""
    from mpilaunch import ssh

    if all(ssh.is_local(h.name, []) for h in cfg.hosts):   # check.hosts_needing_ssh, without
        return False                                     # importing check (12 ms) on one host
    from mpilaunch import check

    bad = check.failed(check.run_checks(cfg, timeout=check.DEFAULT_TIMEOUT, mux=mux))
    for result in bad:
        print(f"mpilaunch: preflight: {result.line()}", file=sys.stderr)
    if bad:
        print("mpilaunch: not started (details: mpilaunch check ...; --no-preflight skips this)",
              file=sys.stderr)
    return bool(bad)


class _NotStarted(Exception):
    """The preflight failed: nothing starts (exit 1)."""


def _ssh_args_in_mca(cfg) -> bool:
    """The user's MCA/extra args carry the ssh options (ModelArts' -mca plm_rsh_args): the
    launcher adds none of its own (plan.make_plan refuses ssh options given twice)."""
    text = " ".join(str(s.value) for s in (cfg.mca_args, cfg.extra_args))
    if cfg.tune_import is not None:
        text += " " + " ".join(cfg.tune_import.mca_tokens)
    return "plm_rsh_args" in text or "plm_ssh_args" in text


def main(argv: Sequence[str]) -> int:
    from mpilaunch import config, launcher, mpi, options, rankcheck
    from mpilaunch import plan as planmod
    from mpilaunch import render

    args = options.parser(options.RUN).parse_args(list(argv))
    env = dict(os.environ)
    cfg = config.build(args, env)
    rankcheck.check(cfg)   # rank-side values and the interpreter, before anything starts
    from mpilaunch import restart

    long_run = restart.settings(args, cfg)   # restarts, grace, watchdog, span (issue 11)
    if cfg.launcher == "srun":   # Slurm starts the ranks, no mpirun (mpilaunch/srun.py)
        from mpilaunch import srun

        return srun.main(cfg, env, args)
    info = mpi.detect(cfg.mpirun, env)
    restart.check_mpi(long_run, info)
    from mpilaunch import ssh

    if cfg.master_port == 0 and not cfg.dry_run and ssh.rank0_is_here(cfg.hosts):
        # rank 0 runs here: pick (and so prove) the port now; then no rank needs the MPI
        # agreement (MPI_Init in every adapter, +0.35 s) only to learn it (issue 13 goal 2)
        from mpilaunch.rank import agree

        cfg = cfg._replace(master_port=agree.free_port())
    cfg = restart.attempt_cfg(cfg, long_run, 0)
    if cfg.dry_run:
        plan = planmod.make_plan(cfg, env, info, "<run-dir>", os.geteuid())
        show_plan(plan, env)
        print(f"# hosts: {cfg.hosts_source}")
        return 0
    # Inside a Slurm job, mpirun starts its daemons through Slurm (srun), not ssh: no ssh check.
    in_slurm = cfg.hosts_source.startswith("Slurm job ")
    run_dir = launcher.make_run_dir()
    try:
        if not args.no_preflight and not in_slurm:
            from mpilaunch import ssh

            mux = None if _ssh_args_in_mca(cfg) else ssh.mux_path(run_dir, len(cfg.hosts))
            if preflight_fails(cfg, mux):
                raise _NotStarted()
            if mux and ssh.mux_sockets(run_dir):   # mpirun's ssh reuses the logins' connections
                cfg = cfg._replace(ssh_extra=tuple(cfg.ssh_extra) + tuple(ssh.mux_client_options(mux)))
        plan = planmod.make_plan(cfg, env, info, run_dir, os.geteuid())
    except BaseException as exc:
        launcher.remove_run_dir(run_dir)
        if isinstance(exc, _NotStarted):
            return 1
        raise
    if args.verbose:
        for name in plan.dropped_x:
            print(f"mpilaunch: -x {name} dropped: {name} is not set here", file=sys.stderr)
        print(f"mpilaunch: {render.show(planmod.argv(plan))}", file=sys.stderr)
    return restart.run(long_run, cfg, env, info, plan, run_dir)
