"""``mpilaunch job [job options] [launcher options] SCRIPT [ARGS...]``: the command.

Without platform variables ``job`` is a plain launch; worker-0 (``VC_TASK_INDEX=0``) runs the
job (:mod:`mpilaunch.job.worker0`); every other host waits (:mod:`mpilaunch.job.waiter`).
"""
from __future__ import annotations

import os
import argparse
from typing import List, Sequence, Tuple

from mpilaunch import contract, run
from mpilaunch.config import options
from mpilaunch.errors import UsageError
from mpilaunch.job.spec import job_spec, log
from mpilaunch.job.waiter import LIVENESS_EVERY, Waiter, liveness_every, worker0_alive_probe
from mpilaunch.job.worker0 import run_worker0

# The job-only options: everything else goes to the launcher as given.
JOB_OPTIONS = frozenset(f for o in options.OPTIONS if o.commands == (options.JOB,) for f in o.flags)


def split_argv(argv: Sequence[str]) -> Tuple[argparse.Namespace, List[str]]:
    """-> (parsed namespace incl. job options, launcher argv without the job options).

    The script and its arguments are left exactly as given (job options after the script
    belong to the script)."""
    argv = list(argv)
    parser = options.parser(options.JOB)
    args = parser.parse_args(argv)
    module_at = options.module_index(argv, parser.value_flags)
    if module_at is not None:             # -m MODULE [ARGS]: everything from -m on is the module's
        head, tail = argv[:module_at], argv[module_at:]
    elif args.script is None:
        head, tail = argv, []
    else:
        cut = len(argv) - len(args.script_args) - 1
        if cut < 0 or argv[cut] != args.script:
            raise UsageError("cannot tell the script from the options; put the options before SCRIPT")
        head, tail = argv[:cut], argv[cut:]
    out: List[str] = []
    i = 0
    while i < len(head):
        tok = head[i]
        if tok.split("=", 1)[0] in JOB_OPTIONS:
            i += 1 if "=" in tok else 2
            continue
        out.append(tok)
        i += 1
    return args, out + tail


def main(argv: Sequence[str]) -> int:
    args, launcher_argv = split_argv(argv)
    env = dict(os.environ)
    wait_s = contract.seconds(*options.setting(args, env, "wait_hosts"))
    lost_after = contract.seconds(*options.setting(args, env, "lost_after"))
    spec = job_spec(env, args)
    if spec is None:                      # no platform variables: a plain launch
        return run.main(launcher_argv)
    if spec.index == 0:
        return run_worker0(spec, args, launcher_argv, env, wait_s)
    every = liveness_every(len(spec.hosts))
    if every > LIVENESS_EVERY and lost_after < 3 * every:
        log(f"job: --lost-after raised from {lost_after:g}s to {3 * every:g}s: {len(spec.hosts)} hosts probe "
            f"worker-0 every {every:g}s each")
        lost_after = 3 * every
    waiter = Waiter(spec, worker0_alive_probe(spec), lost_after, contact_within=2 * wait_s, liveness_every=every)
    waiter.bind()
    log(f"job: host {spec.index} of {len(spec.hosts)} ({spec.hosts[spec.index]}); worker-0 "
        f"({spec.worker0}) runs the job, waiting for it to end")
    return waiter.serve()
