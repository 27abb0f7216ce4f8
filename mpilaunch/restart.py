"""Long jobs, launcher side (issue 11): job-wide restarts, the graceful stop, the stall
watchdog's verdict, and the per-attempt adapter flags (span check, restart count).

**Where the restart happens: the front-end relaunches mpirun.** A failure of any worker, the
scheduler or a host tears the whole job down as before (Open MPI + adapters, ~0.5-2 s), then
the launcher starts a new mpirun, up to ``--max_restarts`` times for the whole job. Chosen
over restarting workers inside live adapters because it is the only way that also survives a
lost host or a killed adapter/daemon (the MPI job is gone then), needs no channel between
adapters, gives every attempt fresh rendezvous state (a new MindSpore scheduler, a new
TCPStore) and costs one mpirun start (~0.3 s locally, bench/bench_restart.py), small next to
the framework's own start (torch import, rendezvous, reading the checkpoint).

* Every attempt's logs go to ``LOG_DIR/attempt<k>/`` (when ``--max_restarts`` > 0), so
  nothing is overwritten; the summary lists each attempt's root cause; the exit status is the
  last attempt's.
* Ports: an attempt after the first gets a fresh free port when the user gave none (rank 0
  here: picked and bound-tested by the launcher; elsewhere ``--master-port 0``: rank 0 picks);
  a new MindSpore scheduler then never meets a node id registered with the old one. A port
  the user gave is kept, and the launcher waits (up to ``PORT_WAIT`` s) until it is free.
* No restart after: success, a stop asked of the launcher (SIGINT/SIGTERM/SIGHUP), or a
  rank-side usage error (exit 2, e.g. the span check): those would fail the same way again.
* Every rank sees ``MPILAUNCH_RESTART_COUNT`` / ``TORCHELASTIC_RESTART_COUNT`` (and
  ``..._MAX_RESTARTS``).
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import time
from collections import namedtuple

from mpilaunch import contract
from mpilaunch.errors import UsageError
from mpilaunch.rank import longrun
from mpilaunch.summary import Collector, describe_status

PORT_WAIT = 60.0
GRACE_MARGIN = 5.0      # after the grace: the adapters' SIGKILL, reports and exit
STALL_STATUS = 124      # as timeout(1)


class LongRun(namedtuple("LongRun", "max_restarts restart_delay term_grace stall_timeout "
                         "span log_dir port_given rank0_here")):
    """The issue-11 settings, validated, plus what each attempt needs from the first."""

    __slots__ = ()


def settings(args, cfg) -> LongRun:
    from mpilaunch import options, ssh

    def value(dest, **kw):
        raw, source = options.setting(args, {}, dest)
        return None if raw is None else contract.seconds(raw, source, allow_zero=True)

    raw, source = options.setting(args, {}, "max_restarts")
    n = contract.whole(raw, source, 0, 1000)
    lr = LongRun(n, value("restart_delay") or 0.0, value("term_grace"), value("stall_timeout"),
                 not getattr(args, "no_span_check", False), cfg.log_dir,
                 str(getattr(args, "master_port", None) or "0").strip() != "0",  # 0: pick
                 ssh.rank0_is_here(cfg.hosts))
    if lr.stall_timeout == 0:
        raise UsageError(f"{options.BY_DEST['stall_timeout'].name}=0: give a number of seconds > 0")
    if cfg.exec_mode and (lr.term_grace is not None or lr.stall_timeout):
        raise UsageError("--term-grace and --stall-timeout need the supervised mode: the adapter "
                         "signals and watches the worker (not --exec)")
    if cfg.launcher == "srun" and (n or lr.term_grace is not None or lr.stall_timeout):
        raise UsageError("--max_restarts, --term-grace and --stall-timeout work with "
                         "--launcher mpirun only (not yet with srun)")
    return lr


def check_mpi(lr: LongRun, info) -> None:
    if info.hydra and lr.term_grace is not None:
        raise UsageError("--term-grace works with Open MPI's mpirun only (it relies on mpirun "
                         "forwarding SIGUSR1 to the ranks; not measured for Hydra)")


def rank0_address(cfg, node_addr=None):
    """Rank 0 runs here and some ranks elsewhere: the address of this host that the first
    other host routes to (what the ranks' MPI agreement would pick, decided here once), or
    None when that host is given by name (the agreement decides then). ``node_addr``: name ->
    the address the scheduler knows for it (Slurm's NodeAddr), asked for that host only."""
    from mpilaunch import ssh
    from mpilaunch.rank import agree

    for h in cfg.hosts[1:]:
        if ssh.host_is_here(h):
            continue
        # an address only: a name lookup here could wait on DNS; the agreement decides then
        addr = h.name if _ipv4(h.name) else node_addr(h.name) if node_addr else None
        return agree.route_source(addr) if _ipv4(addr) else None
    return None


def _ipv4(text) -> bool:
    try:
        return bool(text) and bool(socket.inet_pton(socket.AF_INET, text))
    except OSError:
        return False


def attempt_cfg(cfg, lr: LongRun, k: int):
    """The config of attempt ``k``: its log dir, port and adapter flags."""
    from mpilaunch import rankcmd

    changes = {}
    if lr.max_restarts:
        changes["log_dir"] = os.path.join(lr.log_dir, f"attempt{k}")
    spec = None
    if lr.span:
        from mpilaunch import span

        spec = span.expect_spec(cfg)
    extra = rankcmd.attempt_flags(k if lr.max_restarts else None, lr.max_restarts,
                                  lr.term_grace, lr.stall_timeout, spec)
    if (lr.span and lr.rank0_here and not cfg.master_addr and not cfg.exec_mode
            and spec):
        from mpilaunch import allocation   # Slurm: node names, their NodeAddr from scontrol

        addr = rank0_address(cfg, allocation.node_addr_lookup(cfg.hosts_source, os.environ))
        if addr:   # with the plan's node index, the adapters need no MPI agreement at all
            changes["master_addr"] = addr
    if k > 0 and not lr.port_given:   # a fresh port: nothing of the last attempt holds it
        from mpilaunch.rank import agree

        changes["master_port"] = (agree.free_port() if lr.rank0_here
                                  else cfg.master_port if cfg.exec_mode else 0)
    return cfg._replace(rank_extra=tuple(extra), **changes)


def _wait_port_free(port: int, stopped) -> None:
    from mpilaunch.rank import agree

    end = time.monotonic() + PORT_WAIT
    while not stopped() and time.monotonic() < end:
        try:
            agree.check_port(agree.LOOPBACK, port, "", check_addr=False)
            return
        except UsageError:
            time.sleep(0.5)


# ---------------------------------------------------------------- one attempt

class _Collector(Collector):
    """Takes the watchdog's status lines (``cause: stall``) away from the failure events."""

    def __init__(self, attempt: "Attempt"):
        super().__init__()
        self.attempt = attempt

    def feed_status(self, event) -> None:
        if event.cause == "stall":
            self.attempt.stall_event(event)
        elif event.event == longrun.GRACE_EVENT:    # an adapter's graceful stop
            self.attempt.grace_event(event)
        else:
            super().feed_status(event)


class Attempt:
    """The hooks ``launcher.run`` calls for one attempt (see its ``hooks`` argument)."""

    def __init__(self, index: int, lr: LongRun, np: int):
        self.index, self.lr, self.np = index, lr, np
        self.proc = self.kill = None
        self.started_at = None
        self.silent = {}        # rank -> its last stall event
        self.done = set()       # ranks whose worker exited 0
        self.stalled = None     # the silent ranks' events when the job was ended for it
        self.graceful = False   # the launcher asked for a graceful stop
        self.grace_stops = []   # adapters that made one (asked or not: see finish)
        self.foreign = False    # ... when mpilaunch had not asked
        self.stopped_by = None
        self.status = None
        self.cause = ""
        self.lock = threading.Lock()

    def collector(self) -> Collector:
        return _Collector(self)

    def started(self, proc, kill) -> None:
        self.proc, self.kill, self.started_at = proc, kill, time.monotonic()

    # -- graceful stop
    def on_stop(self, proc, signum, forward) -> bool:
        """The first stop signal, with --term-grace: SIGUSR1 to mpirun (forwarded to every
        rank's group by Open MPI 4.1 and 5.0; the adapters SIGTERM their workers and wait up
        to the grace), then the ordinary teardown when the job has not ended by itself."""
        grace = self.lr.term_grace
        if grace is None or proc is None or self.started_at is None:
            return False
        self.graceful = True
        print(f"mpilaunch: {signal.Signals(signum).name} received: SIGTERM to every worker, "
              f"{grace:g} s to save (signal again to stop at once)", file=sys.stderr, flush=True)
        self.kill(proc, signal.SIGUSR1)
        timer = threading.Timer(grace + GRACE_MARGIN, forward, (signum, None))
        timer.daemon = True
        timer.start()
        return True

    def grace_event(self, event) -> None:
        """An adapter stopped its worker on SIGUSR1. Not asked by us (sent to mpirun or to a
        rank by another process): the job cannot finish without that rank, so every rank
        gets the same graceful stop (mpirun forwards it; an adapter already stopping ignores
        it) and the job ends with 128+SIGUSR1 (see finish)."""
        with self.lock:
            self.grace_stops.append(event)
            first = len(self.grace_stops) == 1 and not self.graceful
        if first and self.proc is not None:
            print(f"mpilaunch: rank {event.rank} stopped its worker on a SIGUSR1 mpilaunch did "
                  "not send: the same graceful stop for every rank", file=sys.stderr, flush=True)
            self.kill(self.proc, longrun.GRACE_SIGNAL)

    # -- stall watchdog
    def stall_event(self, event) -> None:
        with self.lock:
            if event.event == "stall":
                self.silent[event.rank] = event
            elif event.event == "progress":
                self.silent.pop(event.rank, None)
            elif event.event == "done":
                self.done.add(event.rank)
            fire = (self.stalled is None and self.silent
                    and len(set(self.silent) | self.done) >= self.np)
            if fire:
                self.stalled = dict(self.silent)
        if fire and self.proc is not None:
            print(f"mpilaunch: no worker has shown progress for {self.lr.stall_timeout:g} s: "
                  "ending the job", file=sys.stderr, flush=True)
            self.kill(self.proc, signal.SIGTERM)

    # -- the outcome
    def finish(self, status: int, collector: Collector, stopped_by) -> int:
        self.stopped_by = stopped_by
        if self.stalled is not None and stopped_by is None:
            status = STALL_STATUS
            self.cause = ("stalled: no progress from ranks "
                          + ", ".join(str(r) for r in sorted(self.stalled)))
        elif stopped_by is not None:
            self.cause = f"stopped by {signal.Signals(stopped_by).name}"
        elif self.grace_stops and not self.graceful and status == 0:
            # SIGUSR1 to mpirun (or a rank) from something else: the adapters saved and
            # exited 0, but the job did not finish; the status it has without --term-grace
            self.foreign = True
            status = 128 + longrun.GRACE_SIGNAL
            self.cause = "stopped by a SIGUSR1 mpilaunch did not send"
        else:
            self.cause = _root_text(collector, status)
        self.status = status
        self.usage_error = any(e.role == "adapter" and e.event == "error" and e.cause == "self"
                               for e in collector.events)
        return status

    def summary(self, text: str, collector: Collector) -> str:
        if self.stalled is not None and self.stopped_by is None:
            lines = [f"mpilaunch: job failed (exit status {self.status})",
                     f"  root cause: stalled: no worker showed progress (output to its log, or "
                     f"$MPILAUNCH_HEARTBEAT_FILE touched) for {self.lr.stall_timeout:g} s"]
            for rank in sorted(self.stalled):
                ev = self.stalled[rank]
                lines.append(f"  stalled: rank {rank} on host {ev.host}: {ev.message}")
            return "\n".join(lines) + "\n"
        if self.foreign:
            ranks = ", ".join(str(e.rank) for e in sorted(self.grace_stops, key=lambda e: e.rank))
            text = (f"mpilaunch: job failed (exit status {self.status})\n"
                    "  root cause: SIGUSR1 reached the ranks, but mpilaunch did not send it (a "
                    "process sent it to mpirun or to the ranks); with --term-grace it is the "
                    f"graceful-stop signal: ranks {ranks} stopped their workers\n")
        if self.graceful or self.foreign:
            text += _grace_lines(collector, self.lr.term_grace)
        return text


def _root_text(collector: Collector, status: int) -> str:
    lost = collector.lost_hosts()
    if lost:
        return f"host {lost[0]} lost"
    root = collector.root_cause()
    if root is None:
        return f"exit status {status} (no rank reported a failure)"
    who = f"rank {root.rank}" if root.rank is not None else "a rank"
    where = f" on host {root.host}" if root.host not in ("", "?") else ""
    return f"{who} ({root.role}){where}: {describe_status(root.code, root.signal)}"


def _grace_lines(collector: Collector, grace: float) -> str:
    workers = {e.rank: e for e in collector.events
               if e.role == "worker" and e.cause == "terminated"}
    cut = sorted(r for r, e in workers.items() if e.signal == signal.SIGKILL)
    ended = sorted(r for r, e in workers.items() if e.signal != signal.SIGKILL)
    out = f"  graceful stop: SIGTERM to every worker, up to {grace:g} s to save\n"
    if ended:
        out += "  ended within the grace: " + ", ".join(f"rank {r}" for r in ended) + "\n"
    if cut:
        out += ("  save cut: " + ", ".join(f"rank {r}" for r in cut)
                + f" still running after the {grace:g} s grace, killed (SIGKILL); "
                "give a longer --term-grace\n")
    return out


# ---------------------------------------------------------------- the attempts

def run(lr: LongRun, cfg, env, info, plan, run_dir: str) -> int:
    """Attempt 0 (``plan``/``run_dir`` made by run.main from ``attempt_cfg(cfg, lr, 0)``),
    then as many restarts as the budget allows."""
    from mpilaunch import launcher
    from mpilaunch import plan as planmod

    attempts = []
    k = 0
    while True:
        att = Attempt(k, lr, plan.np)
        status = launcher.run(plan, env, run_dir, cfg.keep_tune_file, hooks=att)
        attempts.append(att)
        if (status == 0 or att.stopped_by is not None or att.usage_error
                or k >= lr.max_restarts):
            break
        k += 1
        print(f"mpilaunch: attempt {k - 1} failed ({att.cause}); restarting the job: attempt "
              f"{k} of at most {lr.max_restarts + 1}"
              + (f" in {lr.restart_delay:g} s" if lr.restart_delay else ""),
              file=sys.stderr, flush=True)
        stop = _Between()
        try:
            stop.sleep(lr.restart_delay)
            cfg = attempt_cfg(cfg, lr, k)
            if lr.port_given and lr.rank0_here and not stop.signum:
                _wait_port_free(cfg.master_port, lambda: stop.signum)
        finally:
            stop.restore()
        if stop.signum:
            att.stopped_by = stop.signum
            status = 128 + stop.signum
            print(f"mpilaunch: {signal.Signals(stop.signum).name} received between attempts: "
                  "not restarting", file=sys.stderr, flush=True)
            break
        run_dir = launcher.make_run_dir()
        try:
            plan = planmod.make_plan(cfg, env, info, run_dir, os.geteuid())
        except BaseException:
            launcher.remove_run_dir(run_dir)
            raise
    if lr.max_restarts:
        sys.stderr.write(attempts_summary(attempts, lr, status))
        sys.stderr.flush()
    return status


def attempts_summary(attempts, lr: LongRun, status: int) -> str:
    lines = [f"mpilaunch: {len(attempts)} attempt(s), restart budget {lr.max_restarts}; "
             f"exit status {status} (the last attempt's)"]
    for att in attempts:
        what = "succeeded" if att.status == 0 else f"exit status {att.status}: {att.cause}"
        lines.append(f"  attempt {att.index}: {what}; logs: "
                     f"{os.path.join(lr.log_dir, f'attempt{att.index}')}")
    return "\n".join(lines) + "\n"


class _Between:
    """A stop signal between two attempts: no further attempt starts."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self.signum = None
        self.previous = {s: signal.signal(s, self._on) for s in self.SIGNALS}

    def _on(self, signum, _frame):
        self.signum = self.signum or signum

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self.signum and time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))

    def restore(self) -> None:
        for s, h in self.previous.items():
            signal.signal(s, h)
