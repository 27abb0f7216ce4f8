"""Run and supervise the starter of the ranks (mpirun, mpiexec or srun: ``mpilaunch/backends/``):
files, signals, relays, cleanup; the exit status (``outcome.py``) and the failure summary.

Nothing here depends on which backend runs: it writes the backend's files, starts its argv,
and hands it the running :class:`Job` (``Backend.watch``, ``Backend.on_rank_failure``).

* The starter runs in its own process group (a terminal's Ctrl-C reaches only us; we forward
  exactly one SIGTERM: a second signal makes Open MPI 4.1 exit and orphan its ranks) and
  with PR_SET_PDEATHSIG, so it is told to stop if we are killed.
* If it has not ended ``ESCALATE_AFTER`` seconds after the forwarded signal, it is
  SIGKILLed; the rank adapters notice the loss of their parent (PDEATHSIG) and end too.
* Its stdout and stderr go through ``relays.py`` (status lines into the Collector).
* A stop (SIGINT/SIGTERM/SIGHUP) at any moment ends the job: before the starter starts,
  nothing is started; while Popen runs, it is forwarded as soon as the starter exists.
* The run dir has an owner file; run dirs of launchers that died by SIGKILL are reclaimed by
  the next launch (``rundir.py``). Open MPI facts relied on: docs/OPENMPI_FACTS.md section 9.
* SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT are the workers' (``usersignals.py``): each goes once to
  every rank, through the starter or over the control channel (``control.py``), which is also
  the graceful stop's; the launcher itself neither dies nor stops of them, as mpirun does not.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from typing import List, Mapping, Optional

from mpilaunch import rundir
from mpilaunch.config import allocation
from mpilaunch.output import events
from mpilaunch.launch import relays, usersignals
from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, prctl
from mpilaunch.output.summary import Collector, render_summary, root_text, write_ranks_file

ESCALATE_AFTER = 10.0
LINGER = 3.0    # an adapter's own teardown: 2 s to SIGKILL its workers, then its report
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _child_setup_for(prctl):
    def setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        usersignals.unblock_in_child()
    return setup


def make_run_dir() -> str:
    """A private directory (0700) for the files of one job; those of dead launchers (SIGKILL
    leaves them) are reclaimed first."""
    rundir.reclaim_stale()
    return rundir.make()


def close_ssh_masters(run_dir: str) -> None:
    """The preflight's ssh control masters (mpilaunch/ssh.py), while their sockets exist."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return
    if any(n.startswith("cm-") for n in names):
        from mpilaunch import ssh

        ssh.close_masters(run_dir)


def remove_run_dir(run_dir: str) -> None:
    """A run dir whose launch did not start (preflight failed, bad plan)."""
    close_ssh_masters(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)


def remove_files(plan, run_dir: str, keep_tune: bool) -> None:
    if not keep_tune:
        try:
            os.unlink(plan.tune_path)
        except FileNotFoundError:
            pass
    if keep_tune and os.path.dirname(plan.tune_path) == run_dir:
        # keep the directory that holds the kept tune file; remove the rest
        try:
            os.unlink(plan.hostfile_path)
        except FileNotFoundError:
            pass
        return
    shutil.rmtree(run_dir, ignore_errors=True)


class Attempt:
    """One attempt of the job, as :func:`run` drives it (``mpilaunch/longrun/attempts.py`` starts
    them; ``restart.LongRunAttempt`` fills the hooks in for the graceful stop and the stall
    watchdog). The defaults are a plain launch. In the order they are called:

    linger()                    -> s to wait for adapters still running after the starter
    collector(backend)          -> the Collector the starter's output goes into
    started(job)                   the starter runs (:class:`Job`: kill, end, later)
    on_stop(job, signum, act)   -> True when the attempt handles this stop itself
                                   (``act(signum)``: the ordinary stop, for later)
    verdict()                   -> keyword arguments for ``outcome.decide`` (stalled, ...)
    finish(status, collector, stopped_by)    the attempt's status and cause, recorded
    summary(text, collector)    -> the failure summary, amended
    """

    def __init__(self, index: int = 0):
        self.index = index
        self.status = None
        self.stopped_by = None
        self.cause = ""
        self.usage_error = False

    def linger(self) -> float:
        return LINGER

    def collector(self, backend) -> Collector:
        return Collector(backend)

    def started(self, job) -> None:
        pass

    def on_stop(self, job, signum: int, act) -> bool:
        return False

    def verdict(self) -> dict:
        return {}

    def finish(self, status: int, collector: Collector, stopped_by) -> None:
        self.status, self.stopped_by = status, stopped_by
        if stopped_by is not None:
            self.cause = f"stopped by {signal.Signals(stopped_by).name}"
        else:
            self.cause = root_text(collector, status)
        self.usage_error = any(e.role == "adapter" and e.event == "error" and e.cause == "self"
                               for e in collector.events)

    def summary(self, text: str, collector: Collector) -> str:
        return text


class Job:
    """The running starter (mpirun, mpiexec, srun), as backends and attempts act on it."""

    def __init__(self, proc: subprocess.Popen, collector: Collector, program: str):
        self.proc, self.pid, self.collector, self.program = proc, proc.pid, collector, program
        self.timers: List[threading.Timer] = []
        self.ended = False
        self.control = None     # control.Control, when the attempt has the channel
        self.np = 0

    def kill(self, sig: int) -> None:
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def later(self, seconds: float, fn, *args) -> None:
        timer = threading.Timer(seconds, fn, args)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def end(self, escalate: float = ESCALATE_AFTER) -> None:
        """SIGTERM to the starter (its own teardown of every rank), SIGKILL after ``escalate``
        s if it has not ended (the adapters then end by PDEATHSIG)."""
        if self.ended:
            return
        self.ended = True
        events.teardown(f"mpilaunch ended {self.program}")   # the event record (docs/EVENTS.md)
        self.kill(signal.SIGTERM)
        self.later(escalate, self.kill, signal.SIGKILL)

    def host_lost(self, hosts: List[str], escalate: float) -> None:
        """A backend found hosts lost (their connection ended, their ssh port does not answer)."""
        self.collector.unreachable = list(hosts)
        print(f"mpilaunch: host {', '.join(hosts)} lost (its ssh connection ended and its ssh port "
              "does not answer): stopping the job", file=sys.stderr, flush=True)
        self.end(escalate)

    def cancel(self) -> None:
        for timer in self.timers:
            timer.cancel()


def run(backend, plan, env: Mapping[str, str], run_dir: str, keep_tune: bool, attempt) -> int:
    """Start ``plan`` with ``backend`` and supervise it to its end; the job's exit status.
    ``attempt``: this attempt of the job (``mpilaunch/longrun/attempts.py``: ``Attempt`` for a plain
    launch; restart.py's ``LongRunAttempt`` for the graceful stop and the stall watchdog)."""
    from mpilaunch.hang import server as hang_server
    from mpilaunch.output import outcome

    forwarder = usersignals.Forwarder(backend)
    forwarder.install()     # before any thread of this attempt starts (usersignals.py)
    control = None
    stop = {"signals": 0, "first": None}
    proc: Optional[subprocess.Popen] = None
    job: Optional[Job] = None
    stacks_server = None

    def adapter_died(rank, pid, host):
        """From the control thread: rank ``rank``'s adapter died (no last word) before the job
        was ending: its failure, as a rank's own (docs/HANGS.md)."""
        if stop["first"] is not None or stop.get("rank_failed") or (job is not None and job.ended):
            return      # the teardown's victim, or one more after the first failure
        stop["rank_failed"] = True
        collector.adapter_died(rank, pid, host)
        events.emit("adapter_dead", rank=rank, pid=pid, host=host)
        print(f"mpilaunch: rank {rank}'s adapter (pid {pid} on host {host}) died: its connection "
              "to the launcher closed without its last word; stopping the job",
              file=sys.stderr, flush=True)
        if job is not None:
            backend.on_rank_failure(plan, job)
        else:
            stop["dead_early"] = True

    try:
        collector = attempt.collector(backend)
        control = forwarder.control = _open_control(backend, plan, attempt, adapter_died)
        if control is not None:     # its two variables reach every rank as the starter exports them
            plan = backend.with_control(plan, control.names)
        plan = relays.stdin_target(backend, plan)
        events.attempt_start(attempt.index, plan)   # the event record (docs/EVENTS.md)
        cmd: List[str] = list(backend.argv(plan))
    except BaseException:   # nothing started: the launcher's own signal state as it was
        forwarder.uninstall()
        if control is not None:
            control.close()
        raise

    def on_signal(signum, _frame):
        events.stop_signal(signum)   # the event record (docs/EVENTS.md)
        stop["signals"] += 1
        if stop["first"] is None:
            stop["first"] = signum
        if job is None or proc.poll() is not None:
            return  # before the starter started: acted on right after Popen returns (see below)
        act(signum)

    def act(signum):
        """Stop the running job: the first stop, a repeated one, a forced one."""
        if not stop.get("graceful") and attempt.on_stop(job, signum, act):
            stop["graceful"] = True      # --term-grace: the workers save first (restart.py)
        elif not stop.get("forwarded"):
            stop["forwarded"] = True
            print(f"mpilaunch: {signal.Signals(signum).name} received, stopping the job", file=sys.stderr, flush=True)
            job.end()   # once: a second SIGTERM makes Open MPI 4.1 exit and orphan its ranks
        elif stop["signals"] >= 3:
            print(f"mpilaunch: stopping now (SIGKILL to {backend.program})", file=sys.stderr, flush=True)
            job.kill(signal.SIGKILL)
        else:
            print("mpilaunch: already stopping; signal again to force", file=sys.stderr, flush=True)

    def rank_failed(event):
        if event.cause == "self" and (event.code or event.signal) and not stop.get("rank_failed"):
            stop["rank_failed"] = True
            backend.on_rank_failure(plan, job)

    previous = {}
    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, on_signal)
    try:
        for path, text in backend.files(plan):
            rundir.write_atomic(path, text)
        if os.environ.get("MPILAUNCH_TEST_SIGNAL_BEFORE_START"):  # fault injection for the tests
            os.kill(os.getpid(), int(os.environ["MPILAUNCH_TEST_SIGNAL_BEFORE_START"]))
        if stop["first"] is not None:
            raise _StoppedBeforeStart()
        starter_env = starter_environment(env, control.env if control else {}, backend.env(plan))
        proc = subprocess.Popen(
            cmd, env=starter_env, stdin=relays.stdin_for(backend.stdin(plan)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=_child_setup_for(prctl()), close_fds=True,
        )
        rundir.record_mpirun(run_dir, proc.pid)
        events.emit("starter_start", program=backend.program, pid=proc.pid, argv=cmd)
        job = Job(proc, collector, backend.program)
        job.control, job.np = control, getattr(plan, "np", 0)
        stacks_server = hang_server.open_for(run_dir, plan, control)   # mpilaunch stacks LOG_DIR
        forwarder.started(job, job.np)
        if stop["first"] is not None and not stop.get("forwarded") and not stop.get("graceful"):
            act(stop["first"])   # the stop came while Popen ran (the handler saw no job yet)
        elif stop.get("dead_early"):
            backend.on_rank_failure(plan, job)   # an adapter died before the job object existed
        progress = relays.startup_line(plan)   # a terminal only: how far the start-up got
        streams = [relays.ErrRelay(proc.stderr, collector, rank_failed, progress),
                   relays.OutRelay(proc.stdout, collector, progress)]
        if proc.stdin is not None:
            relays.StdinRelay(proc.stdin).start()   # not joined: it may wait on the terminal
        backend.watch(plan, job)
        attempt.started(job)
        for relay in streams:
            relay.start()
        rc = proc.wait()
        events.emit("starter_exit", returncode=rc)
        if control is not None:
            _linger(control, attempt.linger(), backend.program)
        for relay in streams:
            relay.join(timeout=5)
    except _StoppedBeforeStart:
        rc = 0
    finally:
        if job is not None:
            job.cancel()
        hang_server.close(stacks_server)
        if proc is not None and proc.poll() is None:  # an exception on our side: never leave it running
            proc.kill()
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        forwarder.uninstall()
        if control is not None:
            control.close()
        close_ssh_masters(run_dir)
        remove_files(plan, run_dir, keep_tune)
        if proc is not None and proc.returncode is not None:
            backend.cleanup(proc.pid, proc.returncode)
    events.emit("teardown_end")   # the starter gone, the run files removed
    if rc < 0 and (job is None or not job.ended or -rc not in (signal.SIGTERM, signal.SIGKILL)):
        collector.dead.clear()  # the starter died of a signal we did not send and took its
                                # ranks with it (Hydra's of SIGUSR2): they are its victims

    if stop["first"] is None and rc != 0:
        backend.after(plan, collector, rc)
    verdict = attempt.verdict()
    status = outcome.decide(rc, collector, stopped_by=stop["first"], **verdict)
    attempt.finish(status, collector, stop["first"])
    events.attempt_end(attempt, collector)
    if status != 0:
        summary = render_summary(collector, status, stopped_by=stop["first"],
                                 starter_signal=-rc if rc < 0 and stop["first"] is None else None,
                                 scheduler=getattr(plan, "scheduler", None), program=backend.program,
                                 delivered=forwarder.delivered,
                                 ranks_file=write_ranks_file(collector))
        summary = attempt.summary(summary, collector)
        summary += events.summary(summary)   # recorded; its last line: the report command
        relays.Sink(2).write(summary.encode("utf-8", "replace"))
        if stop["first"] is not None and allocation.in_slurm(env):   # who sent the stop?
            cause = allocation.slurm_stop_cause(env)
            if cause:
                relays.Sink(2).write(f"  scheduler: {cause}\n".encode("utf-8", "replace"))
                events.emit("scheduler_stop", cause=cause)
    return status


def starter_environment(base: Mapping[str, str], control: Mapping[str, str],
                        additions: Mapping[str, str]) -> dict:
    """The starter's environment: ``base``, the control channel's variables, then the
    backend's additions, last and in the backend's order (a backend may need to say what ends
    the environment: hydra.py)."""
    out = {k: v for k, v in base.items() if k not in additions}
    out.update(control)
    for k, v in additions.items():
        out.pop(k, None)
        out[k] = v
    return out


def _linger(control, seconds: float, program: str) -> None:
    """The starter ended while adapters still run (Open MPI 5's prterun leaves its ranks when
    Slurm's scancel signals it with them, while they save): wait for them, so the job (and a
    batch step) ends with them, not before."""
    left = control.wait_gone(0.2)
    if left:
        shown = ", ".join(str(r) for r in left[:8]) + (", ..." if len(left) > 8 else "")
        print(f"mpilaunch: {program} ended; waiting up to {seconds:g} s for rank {shown} to end",
              file=sys.stderr, flush=True)
        control.wait_gone(seconds)


def _supervised(plan) -> bool:
    """The ranks run adapters that stay (not ``--exec``, where the adapter execs the program)."""
    cmd = list(getattr(plan, "rank_command", ()))
    return "--exec" not in (cmd[:cmd.index("--")] if "--" in cmd else cmd)


def _open_control(backend, plan, attempt, on_dead=None):
    """The control channel, for every supervised launch: a dead adapter is seen on it (its
    connection closes without its last word), ``mpilaunch stacks`` asks the ranks over it
    (docs/HANGS.md), the graceful stop and the signals the starter does not forward travel on
    it (docs/ARCHITECTURE.md, "Signals"). Not for ``--exec``: the program replaces the adapter."""
    if not _supervised(plan):
        return None
    from mpilaunch.launch import control

    try:
        return control.Control(getattr(plan, "hosts", ()), getattr(plan, "np", 0), on_dead)
    except OSError as exc:
        control.warn(f"no control channel ({exc}): the graceful stop and the signals "
                     f"{backend.program} does not forward cannot reach the ranks")
        return None


class _StoppedBeforeStart(Exception):
    """A stop signal arrived before mpirun was started: start nothing."""
