"""The attempts of a job: every launch is at least one attempt; with ``--max_restarts`` a
failed attempt is followed by another (a new starter, new adapters, ``LOG_DIR/attempt<k>/``).

Each attempt is a ``supervise.attempt.Attempt`` (the protocol its supervision calls, with the
defaults of a plain launch), or ``restart.LongRunAttempt`` for the graceful stop and the stall
watchdog. A stop signal between two attempts ends the job (``supervise.stopping.BetweenAttempts``).
"""
from __future__ import annotations

import os
import signal
import sys

from mpilaunch import rundir
from mpilaunch.config import longrun
from mpilaunch.supervise import starter
from mpilaunch.supervise.attempt import Attempt
from mpilaunch.supervise.stopping import BetweenAttempts
from mpilaunch.longrun import discovery, health, nextattempt, progress, restart, shrink
from mpilaunch.output import events


def run_job(backend, lr, cfg, env, plan, run_dir: str, disc=None, base=None) -> int:
    """Attempt 0 (``plan``/``run_dir`` made by run.main from ``nextattempt.attempt_cfg(cfg, lr,
    0)``), then as many restarts as the budget allows (``lr``: config.longrun.LongRun). ``disc``:
    ``--host-discovery-script`` (discovery.Discovery), which gives each later attempt its hosts.
    ``base``: the config before ``attempt_cfg``, whose ``master_addr`` is the user's own (attempt
    0's may have been filled in from its first host, which a later attempt may not have)."""
    attempts = []
    k = 0
    base = cfg if base is None else base
    hosts_health = disc.health if disc is not None else health.HostHealth()
    while True:
        # with restarts: it learns the lost hosts and whether any worker made progress
        att = (restart.LongRunAttempt(k, lr, plan.np)
               if longrun.long_run_on(lr) or disc is not None or lr.max_restarts else Attempt(k))
        status = starter.run_attempt(backend, plan, env, run_dir, cfg.keep_tune_file, att)
        attempts += getattr(att, "in_place", [])   # restarted in place, inside this launch
        attempts.append(att)
        k = att.index
        if (status == 0 or att.stopped_by is not None or att.usage_error
                or k >= lr.max_restarts):
            break
        if no_progress_stop(attempts, lr, att):
            break
        k += 1
        if disc is not None:   # the script's hosts, less those cooling down or failing checks
            found = discovery.between(disc, cfg, base, lr, att, k)
            if found is None:    # no host left: the job ends with this attempt's status
                break
            cfg, lr = found
        checked = None
        if disc is None:   # the hosts the failure involved, checked before a relaunch onto them
            try:
                checked = health.before_relaunch(hosts_health, cfg, base, lr, att, k, health.say)
            except health.Ended as end:
                status = end.status
                att.end_note, att.end_status = f"{end}: exit status {status}", status
                health.say(str(end))
                break
        events.emit("restart", next_attempt=k, cause=att.cause, delay=lr.restart_delay)
        print(f"mpilaunch: attempt {k - 1} failed ({att.cause}); restarting the job: attempt "
              f"{k} of at most {lr.max_restarts + 1}"
              + (f" in {lr.restart_delay:g} s" if lr.restart_delay else ""),
              file=sys.stderr, flush=True)
        smaller = None if disc is not None else checked or shrink.shrink(cfg, base, lr, att)
        if smaller is not None:    # --min-hosts: the hosts left run the next attempt
            cfg, lr, dropped = smaller
            dropped = list(dropped)
            att.note = (f"; dropped host {', '.join(dropped)}: attempt {k} on "
                        f"{len(cfg.hosts)} host(s), world size {cfg.np}")
            events.emit("shrink", dropped=dropped, hosts=len(cfg.hosts), np=cfg.np)
            print(f"mpilaunch: host {', '.join(dropped)} dropped (--min-hosts {lr.min_hosts}): "
                  f"attempt {k} runs on {len(cfg.hosts)} host(s), world size {cfg.np}",
                  file=sys.stderr, flush=True)
        stop = BetweenAttempts()
        try:
            stop.sleep(lr.restart_delay)
            cfg = nextattempt.attempt_cfg(cfg, lr, k)
            if lr.port_given and lr.rank0_here and not stop.signum:
                nextattempt.wait_port_free(cfg.master_port, lambda: stop.signum)
        finally:
            stop.restore()
        if stop.signum:
            att.stopped_by = stop.signum
            status = 128 + stop.signum
            print(f"mpilaunch: {signal.Signals(stop.signum).name} received between attempts: "
                  "not restarting", file=sys.stderr, flush=True)
            break
        run_dir = rundir.new()
        try:
            plan = backend.plan(cfg, env, run_dir, os.geteuid())
        except BaseException:
            rundir.remove(run_dir)
            raise
    if lr.max_restarts:
        sys.stderr.write(summary(attempts, lr, status) + (events.hint() if status else ""))
        sys.stderr.flush()
    events.job_end(status, len(attempts))   # the record's last line (docs/EVENTS.md)
    return status


def no_progress_stop(attempts, lr, att) -> bool:
    """``--max_no_progress_restarts N``: the last N attempts all failed before any worker made
    progress (progress.py) -> True, said in one line and in the event record; the job ends
    with the last attempt's status and the rest of the budget unused."""
    n = progress.streak(attempts)
    if not lr.max_no_progress or n < lr.max_no_progress:
        return False
    left = lr.max_restarts - att.index
    att.end_note = (f"{n} attempts in a row failed before any worker made progress "
                           f"(--max_no_progress_restarts {lr.max_no_progress}): not restarted; "
                           f"restart budget {left} left unused")
    events.emit("no_progress", attempts=n, limit=lr.max_no_progress, budget_left=left,
                cause=att.cause)
    print(f"mpilaunch: {n} attempts in a row failed before any worker made progress (last: "
          f"{att.cause}): not restarting; restart budget {left} left unused", file=sys.stderr,
          flush=True)
    return True


def summary(attempts, lr, status: int) -> str:
    last = attempts[-1] if attempts else None
    whose = ("a host failed its check before a restart"
             if getattr(last, "end_status", None) == status else "the last attempt's")
    lines = [f"mpilaunch: {len(attempts)} attempt(s), restart budget {lr.max_restarts}; "
             f"exit status {status} ({whose})"]
    end = getattr(last, "end_note", None)
    if end:
        lines.append(f"  {end}")
    for att in attempts:
        what = ("succeeded" if att.status == 0 else f"exit status {att.status}: {att.cause}"
                + getattr(att, "note", "")
                + ("" if getattr(att, "progress", True) else "; no worker made progress"))
        lines.append(f"  attempt {att.index}: {what}; logs: "
                     f"{os.path.join(lr.log_dir, f'attempt{att.index}')}")
    return "\n".join(lines) + "\n"
