"""``mpilaunch [run] [options] SCRIPT [ARGS...]``: options -> config -> plan -> the starter.

Also the library entry of ``mpilaunch job`` (worker-0 runs exactly this)."""
from __future__ import annotations

import os
import sys
import argparse
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence

from mpilaunch import backends, contract, net
from mpilaunch.config import allocation, launchconfig, mpiargs, options, rankcheck, resilience
from mpilaunch.errors import UsageError
from mpilaunch.attempts import loop, nextattempt
from mpilaunch.backends import base
from mpilaunch.output import events

if TYPE_CHECKING:
    from mpilaunch.backends.base import Backend
    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.monitor.metrics import Exporter

# A plain launch imports only what it uses: ssh's helpers, host discovery (and its source of
# hosts) and the ssh preflight are imported where they are used (docs/ARCHITECTURE.md, start-up).


def preflight_fails(cfg: LaunchConfig, mux: Optional[str] = None) -> bool:
    """Before a multi-host launch: every host resolves, its ssh port answers, ssh logs in
    without a prompt. One line per failure naming the host, instead of Open MPI's
    "daemon failed to report back" after its own time-out. ``mux``: a ControlPath where each
    login leaves its connection open for mpirun's ssh (mpilaunch/ssh.py)."""
    if net.all_here(cfg.hosts):   # no host needs ssh: do not import check (docs/ARCHITECTURE.md, start-up)
        return False
    from mpilaunch import check

    events.preflight_start()   # the event record: preflight per host (LOG_DIR/events.jsonl)
    bad = check.failed(events.preflight(check.run_checks(cfg, timeout=check.DEFAULT_TIMEOUT, mux=mux)))
    for result in bad:
        print(f"mpilaunch: preflight: {result.line()}", file=sys.stderr)
    if bad:
        print("mpilaunch: not started (details: mpilaunch check ...; --no-preflight skips this)",
              file=sys.stderr)
    return bool(bad)


def _ssh_args_in_mca(cfg: launchconfig.LaunchConfig) -> bool:
    """The user's MCA/extra args carry the ssh options (ModelArts' -mca plm_rsh_args): the
    launcher adds none of its own (the configuration refuses ssh options given twice)."""
    return mpiargs.ssh_params_given(cfg.mpi_pieces)


def _ssh_checks(cfg: LaunchConfig, backend: Backend[Any], run_dir: str) -> LaunchConfig:
    """The ssh preflight of a multi-host launch, or its replacement; -> the config to launch.

    A backend that explains a failed start itself (``base.explains_own_start``: Open MPI, whose
    mpirun names the host whose daemon did not report back) gets no preflight before the
    launch: its own ssh is the check, given BatchMode and a connect time-out
    (ssh.start_options), and only after a failed daemon start do the preflight's checks run, to
    name every failing host and the fix (backends/openmpi.py, after; the plan's
    ``start_checks``: :func:`start_checks`). A preflight cost a login per host before mpirun's own
    (~0.15 s per host on the 32-host bench, docs/SCALE.md). Otherwise (Hydra, or ssh options the
    user gives in the MCA args, which mpilaunch does not amend) the preflight runs first, each
    login leaving a control master that the starter's ssh reuses."""
    from mpilaunch import ssh

    if base.explains_own_start(backend, cfg):
        if len(cfg.hosts) > TREE_RADIX and not _flat_ssh(cfg):
            # Past the radix, tree spawn's daemons start daemons with mpirun's ssh options, which
            # Open MPI 5 hands them cut at the first "=" ("-o BatchMode"): their ssh fails and the
            # launch ends with exit 255 and no message (measured at 128 hosts, bare mpirun alike)
            return cfg
        timeout = float(options.BY_DEST["check_timeout"].default)   # check's, without importing it
        return cfg._replace(ssh_extra=tuple(cfg.ssh_extra) + tuple(ssh.start_options(timeout)))
    mux = None if _ssh_args_in_mca(cfg) else ssh.mux_path(run_dir, len(cfg.hosts))
    if preflight_fails(cfg, mux):
        raise loop.NotStarted()
    if mux and ssh.mux_sockets(run_dir):   # the starter's ssh reuses the logins' connections
        cfg = cfg._replace(ssh_extra=tuple(cfg.ssh_extra) + tuple(ssh.mux_client_options(mux)))
    return cfg


# Open files mpirun holds on this node: one per remote host it starts a daemon on over flat ssh
# (the daemon's connection back), ~24 of its own, a few per rank it runs here. Measured (Open MPI
# 5.0.11; 4.1.4 holds 23 + 1 per host alike): 16 hosts needed 37-40, 32 hosts 53-56; below that
# mpirun fails mid-start ("Too many open files", then "A daemon failed to report back" naming a
# healthy host). The base leaves room for the local ranks and for Open MPI's own variation.
FILES_BASE, FILES_PER_HOST, FILES_PER_LOCAL_RANK = 64, 1, 4
TREE_RADIX = 64   # Open MPI's routing tree (routed_radix): up to it, tree spawn starts every daemon as flat ssh
_TRUE = ("1", "true", "yes", "on", "t", "y")


def _flat_ssh(cfg: launchconfig.LaunchConfig) -> bool:
    """The user's MCA args forbid tree spawn (plm_rsh_no_tree_spawn true: ModelArts' default), so
    mpirun itself starts the daemon on every host."""
    tokens = mpiargs.words(cfg.mpi_pieces)
    return any(t.endswith("_no_tree_spawn") and i + 1 < len(tokens) and tokens[i + 1].lower() in _TRUE
               for i, t in enumerate(tokens))


def open_file_limit(cfg: LaunchConfig, n_remote: int, n_local: int = 0) -> None:
    """Flat ssh to ``n_remote`` hosts (and ``n_local`` ranks here): raise this process's soft
    open-file limit (mpirun inherits it) to what mpirun needs, or stop with the one line that says
    which limit to raise. Raised
    only as far as needed (twice the need, at most the hard limit): a huge soft limit makes every
    fork that closes its descriptors one by one slow."""
    import resource

    if n_remote <= 0 or not _flat_ssh(cfg):
        return
    need = FILES_BASE + FILES_PER_HOST * n_remote + FILES_PER_LOCAL_RANK * n_local
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise UsageError(
            f"ulimit -n {soft} (hard {hard}): too low for flat ssh to {n_remote} hosts (mpirun holds "
            f"about {need} open files); raise it to {need} (ulimit -n, or nofile in "
            "/etc/security/limits.conf) or let Open MPI start its daemons as a tree (leave "
            "plm_rsh_no_tree_spawn out of OPENMPI_MCA_ARGS)")
    target = 2 * need if hard == resource.RLIM_INFINITY else min(hard, 2 * need)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def main(argv: Sequence[str]) -> int:
    args = options.parser(options.RUN).parse_args(list(argv))
    env = dict(os.environ)
    cfg = launchconfig.build(args, env)

    hosts = None    # the config's (the loop makes their source when it first relaunches)
    if cfg.resilience is not None and cfg.resilience.discovery_script is not None:
        from mpilaunch.attempts import discovery, hostsource

        disc, cfg = discovery.setup(args, cfg, env)
        hosts = hostsource.source(disc)
    rankcheck.check(cfg)   # rank-side values and the interpreter, before anything starts
    backend = backends.select(cfg, env)
    # restarts, grace, watchdog, span: as this backend can honour them, in the one config
    cfg = cfg._replace(resilience=resilience.for_backend(resilience.of(cfg), backend))
    if cfg.master_port == 0 and not cfg.dry_run and net.rank0_is_here(cfg.hosts):
        # rank 0 runs here: pick (and so prove) the port now; then no rank needs the MPI
        # agreement (MPI_Init in every adapter, +0.35 s) only to learn it
        cfg = cfg._replace(master_port=net.free_port())
    cfg = backend.configure(cfg, env)
    metrics = _metrics(args, env, cfg.dry_run)   # listening before anything starts
    if cfg.dry_run:
        first = nextattempt.attempt_cfg(cfg, 0)
        plan = backend.plan(first, env, "<run-dir>", os.geteuid())
        print(f"# {options.version_text()}")
        backend.show(plan, env)
        print(f"# hosts: {first.hosts_source}")
        return 0
    events.start(cfg, resilience.of(cfg), backend, env)   # LOG_DIR/events.jsonl, from here on (docs/EVENTS.md)
    # rank 0's address as the user gave it (or not): attempt 0's may be filled in from its
    # first host, which a later attempt may not have (nextattempt.attempt_cfg)
    job = loop.JobContext(backend, env, cfg, hosts=hosts,
                          first_checks=_launch_checks(args, backend, env),
                          start_checks=start_checks(args, backend, cfg),
                          verbose=bool(args.verbose), metrics=metrics)
    return loop.run_job(job)


def _metrics(args: argparse.Namespace, env: Mapping[str, str], dry_run: bool) -> Optional[Exporter]:
    """``--metrics-port``: /metrics listening (monitor/metrics.py; a port in use is a usage
    error, nothing started), else None; with ``--dry-run`` the value is only checked."""
    raw, source = options.setting(args, env, "metrics_port")
    if raw is None:
        return None
    port = contract.port(raw, source)
    if dry_run:
        return None
    from mpilaunch.monitor import metrics   # prometheus-client: only for a launch that asks

    addr, _ = options.setting(args, env, "metrics_addr")
    return metrics.Exporter(str(addr).strip(), port, source)


def _launch_checks(args: argparse.Namespace, backend: Backend[Any], env: Mapping[str, str]
                   ) -> Callable[[LaunchConfig, str], LaunchConfig]:
    """The checks before attempt 0, in its run dir (``loop.JobContext.first_checks``):
    ``--preflight deep``'s, the open-file limit of flat ssh, the ssh preflight (or its
    replacement); -> the config to launch, or ``loop.NotStarted``."""
    def checks(cfg: LaunchConfig, run_dir: str) -> LaunchConfig:
        # --preflight deep is asked for by name: --no-preflight (which `mpilaunch job` adds
        # once it saw every host) skips the ssh preflight only
        if cfg.preflight == "deep":   # check --deep first (mpilaunch/check/deep.py)
            from mpilaunch.check import deep

            if deep.gate_fails(cfg, env):
                raise loop.NotStarted()
        remote = sum(1 for h in cfg.hosts if not net.is_here(h))
        if remote and backend.program == "mpirun":
            open_file_limit(cfg, remote, min(cfg.np, sum(h.slots for h in cfg.hosts if net.is_here(h))))
        if _ssh_checked(args, cfg):
            cfg = _ssh_checks(cfg, backend, run_dir)
        return cfg
    return checks


def _ssh_checked(args: argparse.Namespace, cfg: LaunchConfig) -> bool:
    """The launch's ssh hosts are checked (before the start, or after a failed one): some host is
    not this one, and not --no-preflight. Inside a Slurm job, mpirun starts its daemons through
    Slurm (srun), not ssh: no ssh check."""
    return (not args.no_preflight and not allocation.from_slurm(cfg.hosts_from)
            and any(not net.is_here(h) for h in cfg.hosts))


def start_checks(args: argparse.Namespace, backend: Backend[Any], cfg: LaunchConfig
                 ) -> Optional[LaunchConfig]:
    """The config whose hosts the ssh checks check after a failed start, when they are left
    for then (:func:`_ssh_checks`), or None: every attempt's plan carries it to the backend
    (``Plan.start_checks``, read by ``Backend.after``)."""
    return cfg if _ssh_checked(args, cfg) and base.explains_own_start(backend, cfg) else None
