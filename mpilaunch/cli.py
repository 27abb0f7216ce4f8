"""Command line: ``mpilaunch [run] [options] SCRIPT [ARGS...]``, ``mpilaunch check``, ``mpilaunch job``.

User errors print one line ``mpilaunch: error: ...`` and exit 2, before anything starts.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from mpilaunch.errors import UsageError

SUBCOMMANDS = ("run", "check", "job")


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump, exit 2 via UsageError
        raise UsageError(message)


def run_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="mpilaunch",
        description="Launch MindSpore 2.x / PyTorch training through one mpirun over a hostfile.",
        allow_abbrev=False,
    )
    g = p.add_argument_group("hosts and processes (ModelArts variables in brackets)")
    g.add_argument("-np", "--np", "-n", "--worker_num", dest="np", default=None,
                   help="number of ranks (workers) [OPENMPI_NP]; default: total slots")
    g.add_argument("-hostfile", "--hostfile", "--machinefile", dest="hostfile", default=None,
                   help="Open MPI or MPICH hostfile [OPENMPI_HOST_FILE_PATH]")
    g.add_argument("-H", "--host", dest="host", default=None, help="host list a:2,b:2")
    g.add_argument("--local_worker_num", "--slots-per-host", dest="local_worker_num", default=None,
                   help="slots per host for VC_WORKER_HOSTS [MA_NUM_GPUS] or for this machine")
    g.add_argument("--oversubscribe", action="store_true", help="allow more ranks than slots")
    g = p.add_argument_group("mpirun")
    g.add_argument("--mpirun", default=None, help="mpirun to use [MPILAUNCH_MPIRUN]; default: the embedded Open MPI")
    g.add_argument("--ssh-port", dest="ssh_port", default=None, help="sshd port on the hosts [SSHD_PORT]")
    g.add_argument("--ssh-args", dest="ssh_args", default=None, help="extra ssh options, e.g. '-F cfg'")
    g.add_argument("--tune-file", dest="tune_file", default=None,
                   help="where to write the env tune file [TUNE_ENV_FILE]; default: a private 0700 dir")
    g.add_argument("--keep-tune-file", action="store_true", help="do not remove the tune file at the end")
    g.add_argument("--env-prefixes", default=None,
                   help="comma list of variable prefixes broadcast from this host [MPILAUNCH_ENV_PREFIXES]")
    g.add_argument("--bind-args", default=None, help="[OPENMPI_BIND_ARGS]")
    g.add_argument("--x-args", default=None, help="[OPENMPI_X_ARGS]")
    g.add_argument("--mca-args", default=None, help="[OPENMPI_MCA_ARGS]")
    g.add_argument("--extra-args", default=None, help="[OPENMPI_EXTRA_ARGS]")
    g.add_argument("--python", default=None, help="absolute interpreter path for ranks (default: this one)")
    g.add_argument("--dry-run", action="store_true", help="print the mpirun command and tune file; start nothing")
    g.add_argument("--no-preflight", action="store_true",
                   help="skip the ssh preflight run before a multi-host launch (see `mpilaunch check`)")
    g.add_argument("-v", "--verbose", action="store_true")
    g = p.add_argument_group("inside every rank (msrun names)")
    g.add_argument("--log_dir", "--log-dir", dest="log_dir", default=".", help="worker and scheduler logs (default: .)")
    g.add_argument("--worker_log_name", "--worker-log-name", dest="worker_log_name", default=None,
                   help="log name with {rank}, {ip}, {hostname} (default: worker_{rank}.log)")
    g.add_argument("--tail_worker_log", "--tail-worker-log", dest="tail_worker_log", default="-1",
                   help="ranks whose output goes to the console: -1 (all), none, or 0,3")
    g.add_argument("--master_addr", "--master-addr", dest="master_addr", default=None,
                   help="scheduler / MASTER_ADDR address (default: rank 0's host address)")
    g.add_argument("--master_port", "--master-port", dest="master_port", default=None,
                   help="scheduler / MASTER_PORT port (default 8118; 0 picks a free one)")
    g.add_argument("--cluster_time_out", "--cluster-time-out", dest="cluster_time_out", default=None,
                   help="seconds to wait for all workers to join (MS_TOPO_TIMEOUT; default 600)")
    g.add_argument("--bind_core", "--bind-core", dest="bind_core", default=None,
                   help="True, or msrun's JSON dict of CPU ranges per device")
    g.add_argument("--visible-devices", dest="visible_devices", default=None,
                   help="comma list mapping local rank -> DEVICE_ID")
    g.add_argument("--no-scheduler", action="store_true", help="do not start MindSpore's scheduler on rank 0")
    g.add_argument("--exec", dest="exec_mode", action="store_true",
                   help="the script is an MPI program itself (Horovod, mpi4py): exec it with the derived env")
    g.add_argument("--no-python", action="store_true", help="SCRIPT is an executable, not a Python file")
    g.add_argument("--join", default=None, help=argparse.SUPPRESS)  # msrun compatibility: always joined
    p.add_argument("script", nargs="?", default=None)
    p.add_argument("script_args", nargs=argparse.REMAINDER)
    return p


def _show_plan(plan, env) -> None:
    from mpilaunch import plan as planmod
    from mpilaunch import render, tune

    cmd = planmod.argv(plan)
    shown = []
    for i, tok in enumerate(cmd):
        if i > 0 and cmd[i - 1] == "-x" and "=" in tok:
            name, _, value = tok.partition("=")
            tok = f"{name}={tune.mask_value(name, value)}"
        shown.append(tok)
    print(f"# mpirun: {plan.mpi.path} (Open MPI {plan.mpi.version_str})")
    print(render.show(shown))
    print(f"# hostfile {plan.hostfile_path}:")
    sys.stdout.write("".join(f"#   {line}\n" for line in plan.hostfile_text.splitlines()))
    print(f"# tune file {plan.tune_path}:")
    sys.stdout.write("".join(f"#   {line}\n" for line in plan.tune_text.splitlines()))
    if plan.broadcast.routed:
        print("# carried in mpirun's environment (-x NAME): " + ", ".join(
            f"{n}={tune.mask_value(n, env[n])!r}" if not tune.is_secret(n) else f"{n}={tune.MASK}"
            for n in plan.broadcast.routed))
    if plan.dropped_x:
        print("# dropped (unset here): " + " ".join(f"-x {n}" for n in plan.dropped_x))


def _preflight_fails(cfg) -> bool:
    """Before a multi-host launch: every host resolves, its ssh port answers, ssh logs in
    without a prompt. One line per failure naming the host, instead of Open MPI's
    "daemon failed to report back" after its own time-out."""
    from mpilaunch import preflight

    if not preflight.hosts_needing_ssh(cfg.hosts):
        return False
    bad = preflight.failed(preflight.run_checks(cfg, timeout=preflight.DEFAULT_TIMEOUT))
    for result in bad:
        print(f"mpilaunch: preflight: {result.line()}", file=sys.stderr)
    if bad:
        print("mpilaunch: not started (details: mpilaunch check ...; --no-preflight skips this)", file=sys.stderr)
    return bool(bad)


def render_show(plan) -> str:
    from mpilaunch import plan as planmod
    from mpilaunch import render

    return render.show(planmod.argv(plan))


def cmd_run(argv: Sequence[str]) -> int:
    from mpilaunch import config, launcher, mpi
    from mpilaunch import plan as planmod

    args = run_parser().parse_args(list(argv))
    env = dict(os.environ)
    cfg = config.build(args, env)
    info = mpi.detect(cfg.mpirun, env)
    if cfg.dry_run:
        plan = planmod.make_plan(cfg, env, info, "<run-dir>", os.geteuid())
        _show_plan(plan, env)
        return 0
    if not args.no_preflight and _preflight_fails(cfg):
        return 1
    run_dir = launcher.make_run_dir()
    try:
        plan = planmod.make_plan(cfg, env, info, run_dir, os.geteuid())
    except BaseException:
        os.rmdir(run_dir)
        raise
    if args.verbose:
        for name in plan.dropped_x:
            print(f"mpilaunch: -x {name} dropped: {name} is not set here", file=sys.stderr)
        print(f"mpilaunch: {render_show(plan)}", file=sys.stderr)
    return launcher.run(plan, env, run_dir, cfg.keep_tune_file)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "run"
    if argv and argv[0] in SUBCOMMANDS:
        command, argv = argv[0], argv[1:]
    try:
        if command == "check":
            from mpilaunch.preflight import main as check_main
            return check_main(argv)
        if command == "job":
            from mpilaunch.entrypoint import main as job_main
            return job_main(argv)
        return cmd_run(argv)
    except UsageError as exc:
        print(f"mpilaunch: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into e.g. `head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
