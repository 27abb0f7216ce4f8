"""The attempts of a job: every launch is at least one attempt; with ``--max_restarts`` a
failed attempt is followed by another (a new starter, new adapters, ``LOG_DIR/attempt<k>/``).

The loop (:func:`run_job`) plans every attempt (its config, run dir and plan), runs it
(``supervise.starter.run_attempt``) and switches on what :func:`judge` makes of the attempts'
records (``supervise.attempt.AttemptRecord``, immutable once the attempt has ended): each way
out is a ``State``. ``judge`` (nextattempt.py's) is the one owner of that decision, for a
relaunch here and a restart in place (``restart.ResilientAttempt``) alike; only what comes
after it (the next hosts not there, a stop signal in the delay: :func:`relaunch`) ends a job it
would relaunch. Each attempt is a ``supervise.attempt.Attempt`` (the protocol its supervision
calls, with the defaults of a plain launch), or ``restart.ResilientAttempt`` for the
graceful stop, the stall watchdog and the hosts it lost. Where the next attempt's hosts come
from is the host source's affair (hostsource.py). A stop signal between two attempts ends the
job (``supervise.stopping.BetweenAttempts``).
"""
import os
import signal
import sys
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from mpilaunch import rundir
from mpilaunch.config.resilience import Resilience, of, resilience_on
from mpilaunch.supervise import starter
from mpilaunch.supervise.attempt import Attempt, AttemptRecord
from mpilaunch.supervise.stopping import BetweenAttempts
from mpilaunch.attempts import monitoring, nextattempt
from mpilaunch.attempts.nextattempt import Between, State, judge
from mpilaunch.output import events

# A plain launch (one attempt, no restarts, no --term-grace, no watchdog) imports neither the
# restarts' attempt (restart.py, progress.py) nor the hosts' source (hostsource.py): each is
# imported where a launch that uses it first needs it (docs/ARCHITECTURE.md, start-up)
if TYPE_CHECKING:
    from mpilaunch.attempts.hostsource import HostSource, NextHosts
    from mpilaunch.backends.base import Backend
    from mpilaunch.config.launchconfig import LaunchConfig


class NotStarted(Exception):
    """A check before attempt 0 failed (it said why on stderr): nothing starts, exit 1."""


def _no_checks(cfg: "LaunchConfig", run_dir: str) -> "LaunchConfig":
    return cfg


class JobContext(NamedTuple):
    """What every attempt of one job shares. ``cfg``: the launch config as the backend
    configured it, before any attempt's own changes (``nextattempt.attempt_cfg``); ``base``:
    the config whose ``master_addr`` is the user's own (a later attempt on other hosts
    decides rank 0's address again); ``lr``: config.resilience.Resilience; ``hosts``: where each
    attempt's hosts come from (None: the config's, ``hostsource.FixedHosts``, made by the
    first relaunch); ``first_checks(cfg, run_dir) -> cfg``: the launch's checks
    before attempt 0, in its run dir (run.py: the ssh preflight; raises :class:`NotStarted`);
    ``verbose``: attempt 0's argv is said; ``start_checks``: the config the ssh checks check
    after a failed start, when they were left for then (run.start_checks): every attempt's plan
    carries it to the backend (``backends.base.Plan.start_checks``)."""

    backend: "Backend[Any]"
    env: Mapping[str, str]
    cfg: "LaunchConfig"
    hosts: Optional["HostSource"] = None
    first_checks: Callable[["LaunchConfig", str], "LaunchConfig"] = _no_checks
    verbose: bool = False
    board: Any = None       # the monitor's, across the attempts (attempts/monitoring.py)
    metrics: Any = None     # --metrics-port's server (monitor/metrics.py), listening already
    start_checks: Optional["LaunchConfig"] = None


def run_job(job: JobContext) -> int:
    """Attempt 0, then as many relaunches as the budget allows; the job's exit status."""
    board = monitoring.board_for(job.cfg)
    if job.metrics is not None:     # /metrics serves this board, across the attempts
        job.metrics.follow(board)
    try:
        return _loop(job._replace(board=board))
    except NotStarted:
        return 1
    finally:
        if job.metrics is not None:
            job.metrics.close()


def _loop(job: JobContext) -> int:
    records: List[AttemptRecord] = []
    cfg, k = nextattempt.attempt_cfg(job.cfg, 0), 0
    hosts = job.hosts
    while True:
        last, cfg = run_one(job, cfg, k)
        records += [*last.in_place, last]
        state, status = judge(records, of(cfg)), last.status
        if state is State.RELAUNCH:     # unless no host is left, or a stop comes meanwhile
            if hosts is None:   # one source for every relaunch: it keeps the hosts' failures
                from mpilaunch.attempts.hostsource import FixedHosts

                hosts = FixedHosts()
            step = Between(cfg, job.cfg.master_addr, last, last.index + 1)
            state, status, records[-1], nxt = relaunch(step, hosts)
            if nxt is not None:
                cfg, k = nxt.cfg, step.k
                continue
        elif state is State.NO_PROGRESS:
            records[-1] = no_progress_stop(records, of(cfg))
        # SUCCEEDED, STOPPED, USAGE_ERROR, BUDGET_SPENT, NO_PROGRESS, NO_HOSTS: the job ends
        return job_end(records, of(cfg), status, job.board)


def run_one(job: JobContext, cfg: "LaunchConfig", k: int) -> Tuple[AttemptRecord, "LaunchConfig"]:
    """Attempt ``k`` (``cfg``: its config): planned in a run dir of its own, run to its end ->
    (its record, its config: attempt 0's as the launch's checks left it)."""
    run_dir = rundir.new()
    try:
        if k == 0:
            cfg = job.first_checks(cfg, run_dir)
        plan = job.backend.plan(cfg, job.env, run_dir, os.geteuid())
        if job.start_checks is not None:
            plan = plan._replace(start_checks=job.start_checks)
    except BaseException as exc:
        rundir.remove(run_dir)   # its owner file, any ssh masters: all of it
        if k == 0:
            events.job_end(1 if isinstance(exc, NotStarted) else None, 0, error=repr(exc))
        raise
    if k == 0 and job.verbose:
        _say_plan(job.backend, plan)
    # with restarts or hosts to follow: it learns the lost hosts and the workers' progress
    lr = of(cfg)
    att = Attempt(k, lr.stop_grace)   # the graceful stop of a stop signal to mpilaunch
    if resilience_on(lr) or lr.discovery_script is not None or lr.max_restarts:
        from mpilaunch.attempts import restart

        att = restart.ResilientAttempt(k, lr, plan.np)
    starter.run_attempt(job.backend, plan, job.env, run_dir, cfg.keep_tune_file, att, job.board, cfg)
    return att.record(), cfg


def _say_plan(backend: Any, plan: Any) -> None:
    """``--verbose``: the ``-x NAME`` left out, and the starter's argv."""
    from mpilaunch.config import mpiargs

    for name in backend.dropped(plan):
        print(f"mpilaunch: -x {name} dropped: {name} is not set here", file=sys.stderr)
    print(f"mpilaunch: {mpiargs.show(backend.argv(plan))}", file=sys.stderr)


def relaunch(step: Between, hosts: "HostSource"
             ) -> Tuple[State, int, AttemptRecord, Optional["NextHosts"]]:
    """Before attempt ``step.k``: its hosts, the announcement, the delay and a stop between
    -> (RELAUNCH, ...) with the next attempt's settings, or the state the job ends in, its
    status and the last attempt's record as the summary shows it."""
    from mpilaunch.attempts import restart
    from mpilaunch.attempts.hostsource import HostsEnded

    last, k, lr = step.last, step.k, of(step.cfg)
    try:
        nxt = hosts.next(step)
    except HostsEnded as end:
        status = last.status if end.status is None else end.status
        if end.note:
            last = last._replace(end_note=end.note, end_status=end.status)
        return State.NO_HOSTS, status, last, None
    events.emit(events.Kind.RESTART, next_attempt=k, cause=last.cause, delay=lr.restart_delay,
                **restart.relaunch_fields(last))
    print(f"mpilaunch: attempt {k - 1} failed ({last.cause}); restarting the job: attempt "
          f"{k} of at most {lr.max_restarts + 1}"
          + (f" in {lr.restart_delay:g} s" if lr.restart_delay else "")
          + (f" (not in place: {last.fallback})" if last.fallback else ""),
          file=sys.stderr, flush=True)
    last = last._replace(note=last.note + restart.relaunch_note(last) + nxt.note + _dropped(nxt, k))
    signum, cfg = _wait(nxt.cfg, k)
    if signum:
        print(f"mpilaunch: {signal.Signals(signum).name} received between attempts: "
              "not restarting", file=sys.stderr, flush=True)
        return State.STOPPED, 128 + signum, last._replace(stopped_by=signum), None
    return State.RELAUNCH, last.status, last, nxt._replace(cfg=cfg)


def _dropped(nxt: "NextHosts", k: int) -> str:
    """Hosts left out for good (--min-hosts): said, recorded -> the summary's note."""
    if not nxt.dropped:
        return ""
    cfg, dropped = nxt.cfg, list(nxt.dropped)
    events.emit(events.Kind.SHRINK, dropped=dropped, hosts=len(cfg.hosts), np=cfg.np)
    print(f"mpilaunch: host {', '.join(dropped)} dropped (--min-hosts {of(cfg).min_hosts}): "
          f"attempt {k} runs on {len(cfg.hosts)} host(s), world size {cfg.np}",
          file=sys.stderr, flush=True)
    return (f"; dropped host {', '.join(dropped)}: attempt {k} on {len(cfg.hosts)} host(s), "
            f"world size {cfg.np}")


def _wait(cfg: "LaunchConfig", k: int) -> Tuple[Optional[int], "LaunchConfig"]:
    """The restart delay, attempt ``k``'s config, the user's port let go of -> (the stop
    signal that came meanwhile or None, that config)."""
    stop = BetweenAttempts()
    lr = of(cfg)
    try:
        stop.sleep(lr.restart_delay)
        cfg = nextattempt.attempt_cfg(cfg, k)
        if lr.port_given and lr.rank0_here and not stop.signum:
            nextattempt.wait_port_free(cfg.master_port, lambda: stop.signum)
    finally:
        stop.restore()
    return stop.signum, cfg


def job_end(records: Sequence[AttemptRecord], lr: Resilience, status: int, board: Any = None) -> int:
    if lr.max_restarts:
        sys.stderr.write(summary(records, lr, status) + (events.hint() if status else ""))
    sys.stderr.write(monitoring.end_lines(board))   # the stragglers the job had
    sys.stderr.flush()
    # the record's last line (docs/EVENTS.md); the Python API's result
    events.job_end(status, len(records), failures=records[-1].failures if records else ())
    return status


def no_progress_stop(records: Sequence[AttemptRecord], lr: Resilience) -> AttemptRecord:
    """:func:`judge` found that the last ``--max_no_progress_restarts`` attempts all failed
    before any worker made progress (progress.py) -> the last record with the reason the job
    ends, said in one line and in the event record (the job ends with the last attempt's
    status and the rest of the budget unused)."""
    from mpilaunch.attempts import progress

    n, att = progress.streak(records), records[-1]
    left = lr.max_restarts - att.index
    events.emit(events.Kind.NO_PROGRESS, attempts=n, limit=lr.max_no_progress, budget_left=left,
                cause=att.cause)
    print(f"mpilaunch: {n} attempts in a row failed before any worker made progress (last: "
          f"{att.cause}): not restarting; restart budget {left} left unused", file=sys.stderr,
          flush=True)
    return att._replace(end_note=(f"{n} attempts in a row failed before any worker made progress "
                                  f"(--max_no_progress_restarts {lr.max_no_progress}): not "
                                  f"restarted; restart budget {left} left unused"))


def summary(attempts: Sequence[AttemptRecord], lr: Resilience, status: int) -> str:
    last = attempts[-1] if attempts else None
    whose = ("a host failed its check before a restart"
             if last is not None and last.end_status == status else "the last attempt's")
    lines = [f"mpilaunch: {len(attempts)} attempt(s), restart budget {lr.max_restarts}; "
             f"exit status {status} ({whose})"]
    if last is not None and last.end_note:
        lines.append(f"  {last.end_note}")
    for att in attempts:
        what = ("succeeded" if att.status == 0 else f"exit status {att.status}: {att.cause}"
                + att.note + ("" if att.progress else "; no worker made progress"))
        lines.append(f"  attempt {att.index}: {what}; logs: {nextattempt.log_dir_of(lr, att.index)}")
    return "\n".join(lines) + "\n"
