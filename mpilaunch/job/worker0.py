"""Worker-0's run: write the hostfile (``VC_WORKER_HOSTS`` x slots) into a private 0700
directory, validate the launch, wait until every other host is *ready* (bounded by
``--wait-hosts``; a live count on stderr), run the launcher (``mpilaunch.run.main``, the same
code as ``mpilaunch [options] SCRIPT``) and, whatever happens (success, failure, usage error,
signal), tell every other host the job's exit status.

"Ready" = ssh login works *and* that host's ``mpilaunch job`` is waiting (it answered
``hello``), so the final status cannot be missed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from mpilaunch import run, rundir, ssh
from mpilaunch.check.report import MAX_LINES_PER_CHECK
from mpilaunch.check.results import DEFAULT_PARALLEL
from mpilaunch.config import hostfile as hf
from mpilaunch.config import launchconfig, options
from mpilaunch.errors import UsageError
from mpilaunch.job.peer import PEER_TIMEOUT, PeerReply, peer_call
from mpilaunch.job.spec import JobSpec, log

ROUND_EVERY = 1.0             # at most one readiness round (and one status line) per second
REPEAT_STATUS_EVERY = 10.0    # repeat an unchanged status line this often
USAGE_TELL_WITHIN = 60.0      # after a usage error, how long to try to tell the others


def _names(waiting: Sequence[Tuple[str, str]], limit: int = 4) -> str:
    shown = [n for n, _ in waiting[:limit]]
    more = f" +{len(waiting) - limit} more" if len(waiting) > limit else ""
    text = ", ".join(shown) + more
    if len(waiting) == 1 and waiting[0][1]:
        text += f": {waiting[0][1]}"
    return text


class Progress:
    """``mpilaunch: 2/3 hosts ready (waiting for node-c)`` -- printed when it changes, and
    repeated every REPEAT_STATUS_EVERY seconds while it does not."""

    def __init__(self, total: int, out: Callable[[str], None] = log):
        self.total = total
        self.out = out
        self.last: Optional[str] = None   # the status line shown last
        self.when = 0.0

    def show(self, ready: int, waiting: Sequence[Tuple[str, str]], now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        text = f"{ready}/{self.total} hosts ready"
        if waiting:
            text += f" (waiting for {_names(waiting)})"
        if text != self.last or now - self.when >= REPEAT_STATUS_EVERY:
            self.out(text)
            self.last, self.when = text, now


def _round(pending: Dict[int, str], send: Callable[[int], PeerReply], parallel: int,
           crashed: str = "internal error: ") -> None:
    """One parallel round of peer calls; a host that answered ok leaves ``pending``."""
    order = sorted(pending)
    for i, rep in zip(order, ssh.parallel_map(send, order, parallel)):
        if isinstance(rep, BaseException):
            pending[i] = f"{crashed}{rep!r}"
        elif rep.ok:
            del pending[i]
        else:
            pending[i] = rep.why


def wait_for_peers(spec: JobSpec, python: str, wait_s: float, parallel: int = DEFAULT_PARALLEL,
                   call: Callable = peer_call) -> Dict[int, str]:
    """Until every other host answers ``hello``. -> {} on success, else {index: why} for the
    hosts still not ready when ``wait_s`` ran out."""
    pending = {i: "" for i in range(len(spec.hosts)) if i != spec.index}
    progress = Progress(len(spec.hosts))
    deadline = time.monotonic() + wait_s
    while True:
        progress.show(len(spec.hosts) - len(pending), [(spec.hosts[i], w) for i, w in sorted(pending.items())])
        if not pending:
            return {}
        started = time.monotonic()
        left = deadline - started
        if left <= 0:
            return pending
        each = max(1.0, min(PEER_TIMEOUT, left / 2))
        _round(pending, lambda i: call(spec, i, {"op": "hello", "key": spec.key}, python, each), parallel)
        pause = ROUND_EVERY - (time.monotonic() - started)
        if pending and pause > 0:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


def notify_peers(spec: JobSpec, status: int, python: str, within: float = PEER_TIMEOUT,
                 parallel: int = DEFAULT_PARALLEL, call: Callable = peer_call) -> Dict[int, str]:
    """Tell every other host the job's exit status, retrying (one round a second) the hosts
    not reached yet for up to ``within`` seconds. -> {index: why} for failures."""
    pending = {i: "" for i in range(len(spec.hosts)) if i != spec.index}
    deadline = time.monotonic() + within
    while pending:
        started = time.monotonic()
        each = max(1.0, min(PEER_TIMEOUT, deadline - started))
        _round(pending, lambda i: call(spec, i, {"op": "done", "status": status, "key": spec.key},
                                       python, each), parallel, crashed="")
        if not pending or time.monotonic() + ROUND_EVERY > deadline:
            break
        time.sleep(max(0.0, ROUND_EVERY - (time.monotonic() - started)))
    return pending


class _Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_interrupted(signum: int, _frame: object) -> None:
    raise _Interrupted(signum)


def write_hostfile(spec: JobSpec, run_dir: str) -> str:
    path = os.path.join(run_dir, "hostfile")
    rundir.write_atomic(path, hf.render_entries(spec.entries()))   # read back by the launch
    return path


def _log_capped(lines: List[str]) -> None:
    for line in lines[:MAX_LINES_PER_CHECK]:
        log(line)
    if len(lines) > MAX_LINES_PER_CHECK:
        log(f"  ... and {len(lines) - MAX_LINES_PER_CHECK} more")


def run_worker0(spec: JobSpec, args: argparse.Namespace, launcher_argv: List[str], env: Mapping[str, str], wait_s: float) -> int:
    python = sys.executable
    log(f"job: worker-0 of {len(spec.hosts)} host(s) ({spec.worker0}), {spec.slots} slot(s) per host")
    run_dir = tempfile.mkdtemp(prefix="mpilaunch-job-")
    os.chmod(run_dir, 0o700)
    status = 1
    tell_within = PEER_TIMEOUT        # after a launch every peer was ready: one short round
    previous = {s: signal.signal(s, _raise_interrupted) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        try:
            hostfile_path = write_hostfile(spec, run_dir)
            run_argv = ["--hostfile", hostfile_path] + list(launcher_argv)
            launchconfig.build(options.parser(options.RUN).parse_args(run_argv), env)   # usage errors now, before waiting
            if not args.dry_run and len(spec.hosts) > 1:
                missing = wait_for_peers(spec, python, wait_s)
                if missing:
                    log(f"job: gave up after {wait_s:g}s (--wait-hosts); not ready:")
                    _log_capped([f"  {spec.hosts[i]}: {why or 'no answer yet'}" for i, why in sorted(missing.items())])
                    return status
            for s, h in previous.items():   # the launcher handles signals itself from here
                signal.signal(s, h)
            # every host was just seen ready over ssh: no second preflight
            status = run.main(["--no-preflight"] + run_argv if len(spec.hosts) > 1 else run_argv)
            return status
        except UsageError as exc:
            # Shown now; then the waiting hosts (some maybe not up yet) learn status 2.
            status = 2
            print(f"mpilaunch: error: {exc}", file=sys.stderr, flush=True)
            tell_within = min(wait_s, USAGE_TELL_WITHIN)
            return status
        except KeyboardInterrupt:
            status = 130
            raise
        except _Interrupted as exc:
            status = 128 + exc.signum
            log(f"job: {signal.Signals(exc.signum).name} received while waiting for the hosts; stopping")
            return status
    finally:
        for s in previous:
            signal.signal(s, signal.SIG_IGN)   # one notification round, not interrupted
        try:
            if len(spec.hosts) > 1:
                failed = notify_peers(spec, status, python, within=tell_within)
                for i, why in sorted(failed.items())[:MAX_LINES_PER_CHECK]:
                    log(f"job: could not tell {spec.hosts[i]} that the job ended ({why}); it stops by "
                        "itself when worker-0 is gone (--lost-after)")
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            shutil.rmtree(run_dir, ignore_errors=True)
