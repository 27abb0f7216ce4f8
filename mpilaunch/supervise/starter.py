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

import gc
import os
import signal
import subprocess
import sys
import threading
from typing import IO, TYPE_CHECKING, Any, Callable, List, Mapping, Optional, cast

from mpilaunch import rundir
from mpilaunch.config import allocation
from mpilaunch.supervise import control as control_channel
from mpilaunch.supervise import relays, usersignals
from mpilaunch.supervise.ending import Ending
from mpilaunch.supervise.stopping import STOP_SIGNALS, StopState
from mpilaunch.output import events, outcome
from mpilaunch.output.summary import Collector, render_summary, write_ranks_file
from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, prctl

if TYPE_CHECKING:
    from mpilaunch.config.launchconfig import LaunchConfig
    from mpilaunch.backends.base import Backend, Plan
    from mpilaunch.supervise.attempt import Attempt

ESCALATE_AFTER = 10.0


def wait_starter(proc: subprocess.Popen) -> int:
    """``proc.wait()`` during which this process's signal handlers still run as their signals
    come. Python runs a handler in the main thread only, when it next runs bytecode; the kernel
    gives a signal to another thread of the process when the main thread already has one
    pending (two sent together: Slurm's --signal warning is SIGCONT then the signal, scancel's
    SIGCONT then SIGTERM), and a main thread blocked in waitpid then ran that handler only when
    the starter had ended (measured: 1 in 5 such pairs under load; the workers' SIGUSR1 reached
    no one). So the main thread waits in select on the starter's pidfd and on the wakeup fd
    that the C-level handler writes to, from whichever thread took the signal."""
    import select

    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):      # no pidfd here (Linux < 5.3)
        return proc.wait()
    r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:                     # not the main thread: it is the one handlers run in
        for fd in (pidfd, r, w):
            os.close(fd)
        return proc.wait()
    try:
        while proc.poll() is None:
            select.select([pidfd, r], [], [])
            try:
                while os.read(r, 256):
                    pass
            except BlockingIOError:
                pass
    finally:
        signal.set_wakeup_fd(old)
        for fd in (pidfd, r, w):
            os.close(fd)
    return proc.returncode


def _child_setup_for(prctl: Callable[..., int]) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        usersignals.unblock_in_child()
    return setup


class Job:
    """The running starter (mpirun, mpiexec, srun), as backends and attempts act on it. ``stop``:
    the attempt's state (stopping.StopState), which :meth:`end` moves; its own when none is given."""

    def __init__(self, proc: subprocess.Popen, collector: Optional[Collector], program: str,
                 stop: Optional[StopState] = None):
        self.proc, self.pid, self.collector, self.program = proc, proc.pid, collector, program
        self.timers: List[threading.Timer] = []
        self.control: Optional[control_channel.Control] = None   # when the attempt has the channel
        self.np = 0
        self.stop = stop if stop is not None else StopState()

    @property
    def ended(self) -> bool:   # the starter was asked to end (the attempt's state: ENDING, FORCED)
        return self.stop.ending

    def kill(self, sig: int) -> None:
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass

    def later(self, seconds: float, fn: Callable[..., object], *args: object) -> None:
        timer = threading.Timer(seconds, fn, args)
        timer.daemon = True
        timer.start()
        self.timers.append(timer)

    def end(self, escalate: float = ESCALATE_AFTER) -> None:
        """SIGTERM to the starter (its own teardown of every rank), SIGKILL after ``escalate``
        s if it has not ended (the adapters then end by PDEATHSIG). Once, whoever asks."""
        with self.stop.lock:
            if not self.stop.end():
                return
            events.teardown(f"mpilaunch ended {self.program}")   # the event record (docs/EVENTS.md)
            self.kill(signal.SIGTERM)
            self.later(escalate, self.kill, signal.SIGKILL)

    def host_lost(self, hosts: List[str], escalate: float) -> None:
        """A backend found hosts lost (their connection ended, their ssh port does not answer)."""
        with self.stop.lock:
            if self.collector is not None:
                self.collector.unreachable = list(hosts)
            print(f"mpilaunch: host {', '.join(hosts)} lost (its ssh connection ended and its ssh "
                  "port does not answer): stopping the job", file=sys.stderr, flush=True)
            self.end(escalate)

    def cancel(self) -> None:
        for timer in self.timers:
            timer.cancel()


def run_attempt(backend: Backend, plan: Plan, env: Mapping[str, str], run_dir: str,
                keep_tune: bool, attempt: Attempt, board: Any = None, cfg: Optional[LaunchConfig] = None) -> int:
    """Start ``plan`` with ``backend`` and supervise it to its end; the attempt's exit status.
    ``attempt``: the protocol of supervise/attempt.py (``Attempt`` for a plain launch;
    attempts/restart.py's ``ResilientAttempt`` for the graceful stop and the stall watchdog).
    ``board``: the monitor's (monitor/board.py), fed the ranks' samples; None: monitor off.
    ``cfg``: the attempt's LaunchConfig, for the console's settings (None: a plain relay)."""
    s = _Supervision(backend, plan, attempt, run_dir, board)
    s.console_cfg = cfg
    s.prepare()                 # nothing started yet: the control channel, the argv
    rc = s.start_and_watch(env, keep_tune)
    return s.conclude(rc, env)


class _Supervision:
    """One attempt from the starter's start to its summary. Its phases, in order: ``prepare``,
    ``start_and_watch`` (files, the starter, relays, its end, every file and process of ours
    gone), ``conclude`` (the exit status and the summary). The stop-signal handler, the relays
    and the control thread act on it through ``self.ending`` (ending.py: one lock for every
    decision that ends the attempt); what they learnt is ``self.stop``."""

    console_cfg: Optional[LaunchConfig] = None   # the console's settings (run_attempt's cfg)

    def __init__(self, backend: Backend, plan: Plan, attempt: Attempt, run_dir: str,
                 board: Any = None) -> None:
        self.backend, self.plan, self.attempt, self.run_dir = backend, plan, attempt, run_dir
        self.board = board
        self.ending = Ending(backend, attempt)
        self.stop = self.ending.stop
        self.proc: Optional[subprocess.Popen] = None
        self.job: Optional[Job] = None
        self.control: Optional[control_channel.Control] = None
        self.stacks_server: Any = None      # stacks/server.py's, for `mpilaunch stacks`
        self.forwarder = usersignals.Forwarder(backend)
        self.forwarder.install()     # before any thread of this attempt starts (usersignals.py)

    # -- phases
    def prepare(self) -> None:
        try:
            self.collector = self.ending.collector = self.attempt.collector(self.backend)
            # before any socket of ours exists: with fd 0 closed, the control channel's socket
            # would be fd 0, and read as a stdin for rank 0 that never ends
            self.plan = relays.stdin_target(self.backend, self.plan)
            self.control = self.forwarder.control = _open_control(
                self.backend, self.plan, self.attempt, self.ending.adapter_died,
                self.board.feed if self.board is not None else None)
            if self.control is not None:   # its two variables reach every rank as the starter exports them
                self.plan = self.backend.with_control(self.plan, self.control.names)
            events.attempt_start(self.attempt.index, self.plan)   # the event record (docs/EVENTS.md)
            self.cmd: List[str] = list(self.backend.argv(self.plan))
        except BaseException:   # nothing started: the launcher's own signal state as it was
            self.forwarder.uninstall()
            if self.control is not None:
                self.control.close()
            raise

    def start_and_watch(self, env: Mapping[str, str], keep_tune: bool) -> int:
        """-> the starter's return code (0 when a stop came before it started)."""
        backend, plan, stop = self.backend, self.plan, self.stop
        previous = {sig: signal.signal(sig, self.ending.on_signal) for sig in STOP_SIGNALS}
        self.ending.start()     # a signal before it started waits in its queue
        try:
            for path, text in backend.files(plan):
                rundir.write_atomic(path, text)
            if os.environ.get("MPILAUNCH_TEST_SIGNAL_BEFORE_START"):  # fault injection for the tests
                os.kill(os.getpid(), int(os.environ["MPILAUNCH_TEST_SIGNAL_BEFORE_START"]))
            if stop.asked:
                return 0    # start nothing
            return self._watch(*self._start(env))
        finally:
            self._teardown(previous, keep_tune)

    def _start(self, env: Mapping[str, str]) -> "tuple[subprocess.Popen, Job]":
        backend, plan, stop, control = self.backend, self.plan, self.stop, self.control
        starter_env = starter_environment(env, control.env if control else {}, backend.env(plan))
        self.proc = proc = subprocess.Popen(
            self.cmd, env=starter_env, stdin=relays.stdin_for(backend.stdin(plan)),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=_child_setup_for(prctl()), close_fds=True,
        )
        rundir.record_mpirun(self.run_dir, proc.pid)
        events.emit(events.Kind.STARTER_START, program=backend.program, pid=proc.pid, argv=self.cmd)
        self.job = job = Job(proc, self.collector, backend.program, stop=stop)
        job.control, job.np = control, plan.np
        from mpilaunch.stacks import server as hang_server   # once started: not on the way to Popen
        if self.board is not None:
            self.board.attempt_started(self.attempt.index, plan.np, self.collector, control)
        # mpilaunch stacks LOG_DIR, mpilaunch top LOG_DIR
        self.stacks_server = hang_server.open_for(self.run_dir, plan, control, board=self.board)
        self.forwarder.started(job, job.np)
        # a stop that came while Popen ran, an adapter that died before the job existed
        self.ending.attach(job, plan)
        # the launch's start-up is over (cli.py turned the collector off for it): what it
        # allocated lives as long as the launcher, so no later collection walks it again
        gc.freeze()
        gc.enable()
        return proc, job

    def _watch(self, proc: subprocess.Popen, job: Job) -> int:
        backend, plan = self.backend, self.plan
        progress = relays.startup_line(plan)   # a terminal only: how far the start-up got
        out, err = cast(IO[bytes], proc.stdout), cast(IO[bytes], proc.stderr)   # PIPEs (_start)
        stdout, on_event = self._stdout_relay(out, progress)
        streams = [relays.ErrRelay(err, self.collector, on_event, progress), stdout]
        if proc.stdin is not None:
            relays.StdinRelay(proc.stdin).start()   # not joined: it may wait on the terminal
        backend.watch(plan, job)
        self.attempt.started(job, self.board)
        for relay in streams:
            relay.start()
        rc = wait_starter(proc)
        events.emit(events.Kind.STARTER_EXIT, returncode=rc)
        if self.control is not None:
            _linger(self.control, self.attempt.linger(), backend.program, self.collector.lost_hosts)
        for relay in streams:
            relay.join(timeout=5)
        return rc

    def _stdout_relay(self, out: IO[bytes], progress: Any) -> "tuple[threading.Thread, Callable[[Any], None]]":
        """The starter's stdout relay, and what the stderr relay calls at each status line.
        The console's collapsing and budget (output/console.py: imported here, once the starter
        runs) unless both are off, one rank prints to the console, or --exec (no ``[rank<R>]``)."""
        cfg, plan = self.console_cfg, self.plan
        if cfg is None or not any(cfg.console) or plan.exec_mode or plan.np <= 1:
            return relays.OutRelay(out, self.collector, progress), self.ending.rank_failed
        from mpilaunch.contract import parse_tail_spec
        from mpilaunch.output import console

        expected = console.expected_ranks(plan.np, parse_tail_spec(cfg.tail_worker_log))
        if expected <= 1:
            return relays.OutRelay(out, self.collector, progress), self.ending.rank_failed
        window, budget = cfg.console

        hint = "LOG_DIR/worker_<rank>.log (mpilaunch logs LOG_DIR)".replace("LOG_DIR", cfg.log_dir)
        relay = console.CollapseRelay(out, relays.Sink(1).write, lambda text: self.collector.feed_text(text, "stdout"),
                                      window, expected, console.Budget(budget, hint) if budget else None,
                                      progress.finish if progress is not None else None)

        def on_event(event: Any) -> None:
            self.ending.rank_failed(event)
            if event.cause == "self" and (event.code or event.signal) and event.rank is not None:
                relay.failed(event.rank)
        return relay, on_event

    def _teardown(self, previous: Mapping[signal.Signals, Any], keep_tune: bool) -> None:
        """Every exit path: nothing of this attempt left running, the launcher's signal state
        as it was, the run files removed."""
        proc = self.proc
        from mpilaunch.stacks import server as hang_server
        hang_server.close(self.stacks_server)
        if proc is not None and proc.poll() is None:  # an exception on our side: never leave it running
            proc.kill()
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        self.ending.close()     # every stop signal acted on: no timer is started after this
        if self.job is not None:
            self.job.cancel()
        self.forwarder.uninstall()
        if self.control is not None:
            everyone_left = self.control.all_said_bye(self.plan.np)
            self.control.close()
            if proc is not None and not everyone_left:
                _end_leftovers(self.control, self.backend.program)
        rundir.close_ssh_masters(self.run_dir)
        rundir.remove_files(self.plan, self.run_dir, keep_tune)
        if proc is not None and proc.returncode is not None:
            self.backend.cleanup(proc.pid, proc.returncode)
        events.emit(events.Kind.TEARDOWN_END)   # the starter gone, the run files removed

    def conclude(self, rc: int, env: Mapping[str, str]) -> int:
        """The attempt's exit status, and on a failure its summary on stderr."""
        backend, plan, collector, stop, job = self.backend, self.plan, self.collector, self.stop, self.job
        if rc < 0 and (job is None or not job.ended or -rc not in (signal.SIGTERM, signal.SIGKILL)):
            collector.dead.clear()  # the starter died of a signal we did not send and took its
                                    # ranks with it (Hydra's of SIGUSR2): they are its victims
        if not stop.asked and rc != 0:
            backend.after(plan, collector, rc)
        status = outcome.decide(rc, collector, stopped_by=stop.first, **self.attempt.verdict())
        self.attempt.finish(status, collector, stop.first)
        events.attempt_end(self.attempt, collector)
        if status == 0:
            return status
        summary = render_summary(collector, status, stopped_by=stop.first,
                                 starter_signal=-rc if rc < 0 and not stop.asked else None,
                                 scheduler=plan.scheduler, program=backend.program,
                                 delivered=self.forwarder.delivered,
                                 ranks_file=write_ranks_file(collector))
        summary = self.attempt.summary(summary, collector)
        summary += events.summary(summary)   # recorded; its last line: the report command
        relays.Sink(2).write(summary.encode("utf-8", "replace"))
        if stop.asked and allocation.in_slurm(env):   # who sent the stop?
            cause = allocation.slurm_stop_cause(env)
            if cause:
                relays.Sink(2).write(f"  scheduler: {cause}\n".encode("utf-8", "replace"))
                events.emit(events.Kind.SCHEDULER_STOP, cause=cause)
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


def _linger(control: control_channel.Control, seconds: float, program: str, lost: Callable[[], List[str]]) -> None:
    """The starter ended while adapters still run (Open MPI 5's prterun leaves its ranks when
    Slurm's scancel signals it with them, while they save): wait for them, so the job (and a
    batch step) ends with them, not before; not for those on a host the starter lost."""
    left = control.wait_gone(0.2, lost)
    if left:
        shown = ", ".join(str(r) for r in left[:8]) + (", ..." if len(left) > 8 else "")
        print(f"mpilaunch: {program} ended; waiting up to {seconds:g} s for rank {shown} to end",
              file=sys.stderr, flush=True)
        control.wait_gone(seconds, lost)


def _end_leftovers(control: control_channel.Control, program: str) -> None:
    """Processes of this attempt still on this host once its starter has ended (an adapter
    started as the starter exited never got its parent-death signal): ended (leftovers.py).
    Only looked for when some rank did not say its last word; a quiet job pays nothing (not
    even the import)."""
    from mpilaunch.supervise import leftovers

    found, stuck = leftovers.end(control_channel.TOKEN_VAR, control.token)
    if found:
        events.emit(events.Kind.LEFTOVERS_ENDED, pids=found)
    if stuck:
        print(f"mpilaunch: {program} ended, but process {', '.join(map(str, stuck))} of this job "
              "could not be ended on this host", file=sys.stderr, flush=True)


def _open_control(backend: Backend, plan: Plan, attempt: Attempt,
                  on_dead: Optional[Callable[[int, Optional[int], str], None]] = None,
                  on_sample: Optional[Callable[[Any], None]] = None
                  ) -> Optional[control_channel.Control]:
    """The control channel, for every supervised launch: a dead adapter is seen on it (its
    connection closes without its last word), ``mpilaunch stacks`` asks the ranks over it
    (docs/HANGS.md), the graceful stop and the signals the starter does not forward travel on
    it (docs/ARCHITECTURE.md, "Signals"). Not for ``--exec``: the program replaces the adapter."""
    if plan.exec_mode:     # the ranks run no adapter that stays
        return None
    try:
        return control_channel.Control(plan.hosts, plan.np, on_dead, on_sample=on_sample)
    except OSError as exc:
        control_channel.warn(f"no control channel ({exc}): the graceful stop and the signals "
                     f"{backend.program} does not forward cannot reach the ranks")
        return None
