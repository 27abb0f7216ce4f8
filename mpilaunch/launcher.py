"""Run and supervise mpirun: files, signals, exit status, failure summary, cleanup.

* mpirun starts in its own process group (a terminal's Ctrl-C reaches only us; we forward
  exactly one SIGTERM: a second signal makes Open MPI 4.1 exit and orphan its ranks) and
  with PR_SET_PDEATHSIG, so it is told to stop if we are killed.
* If mpirun has not ended ``ESCALATE_AFTER`` seconds after the forwarded signal, it is
  SIGKILLed; the rank adapters notice the loss of their parent (PDEATHSIG) and end too.
* stdout is relayed in large chunks (a bounded tail is kept for Open MPI's own messages,
  which 5.x prints there); stderr is relayed line by line so the adapters'
  status lines can be collected for the failure summary. Both are written at the fd level:
  a closed or broken stdout never stops the draining.
* A stop (SIGINT/SIGTERM/SIGHUP) at any moment ends the job: before mpirun starts, nothing is
  started; while Popen runs, it is forwarded as soon as mpirun exists.
* The run dir has an owner file; run dirs of launchers that died by SIGKILL are reclaimed by
  the next launch (``rundir.py``). Open MPI facts relied on: docs/OPENMPI_FACTS.md section 9.
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from typing import List, Mapping, Optional

from mpilaunch import allocation, rundir, tune
from mpilaunch.pdeathsig import PR_SET_PDEATHSIG, prctl
from mpilaunch.plan import LaunchPlan, argv
from mpilaunch.summary import STATUS_PREFIX, Collector, parse_status_line, render_summary

ESCALATE_AFTER = 10.0
HOST_LOST_ESCALATE = 3.0   # Hydra, a host lost: mpiexec's own teardown waits on the dead proxy


def _child_setup_for(prctl):
    def setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    return setup


def make_run_dir() -> str:
    """A private directory (0700) for the files of one job; those of dead launchers (SIGKILL
    leaves them) are reclaimed first."""
    rundir.reclaim_stale()
    return rundir.make()


def write_files(plan: LaunchPlan) -> None:
    tune.write_atomic(plan.hostfile_path, plan.hostfile_text)   # Hydra: host:N form
    tune.write_atomic(plan.tune_path, plan.tune_text)


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


def remove_files(plan: LaunchPlan, run_dir: str, keep_tune: bool) -> None:
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


class _Relay(threading.Thread):
    """mpirun's stderr -> our stderr, minus the adapters' status lines."""

    def __init__(self, stream, collector: Collector):
        super().__init__(name="stderr-relay", daemon=True)
        self.stream = stream
        self.collector = collector
        self.on_failure = None   # Hydra: called once at the first rank failure (see run)

    def run(self) -> None:
        out = _Sink(2)
        marker = STATUS_PREFIX.encode()
        for raw in iter(self.stream.readline, b""):
            if marker in raw:
                head, _, rest = raw.partition(marker)
                event = parse_status_line(STATUS_PREFIX + rest.decode("utf-8", "replace").rstrip("\r\n"))
                if event is not None:
                    self.collector.feed_status(event)
                    if self.on_failure is not None and event.cause == "self" and (event.code or event.signal):
                        self.on_failure, hook = None, self.on_failure
                        hook()
                    if not head.strip():
                        continue
                    raw = head + b"\n"
            self.collector.feed_text(raw.decode("utf-8", "replace"), "stderr")
            out.write(raw)


class _StdoutRelay(threading.Thread):
    """mpirun's stdout -> our stdout in large chunks. Only a bounded tail is kept, for the
    messages Open MPI 5 prints there (a lost daemon, a rank killed by a signal)."""

    def __init__(self, stream, collector: Collector):
        super().__init__(name="stdout-relay", daemon=True)
        self.fd = stream.fileno()
        self.collector = collector

    def run(self) -> None:
        out = _Sink(1)
        while True:
            data = os.read(self.fd, 1 << 20)
            if not data:
                return
            out.write(data)
            self.collector.feed_text(data.decode("utf-8", "replace"), "stdout")


class _Sink:
    """Our stdout/stderr at the fd level. A closed fd (``mpilaunch ... >&-``: Python then has
    no ``sys.stdout`` at all) or a reader that went away (EPIPE) must not stop the relay: it
    keeps draining mpirun's pipe (else mpirun and the ranks block on a full pipe) and the
    ranks' log files keep their full copy."""

    def __init__(self, fd: int):
        self.fd, self.broken = fd, False

    def write(self, data: bytes) -> None:
        while data and not self.broken:
            try:
                n = os.write(self.fd, data)
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return
            data = data[n:]


def stdin_target(plan: LaunchPlan) -> LaunchPlan:
    """``--stdin`` not given: rank 0 reads our stdin, as with bare mpirun; but when our stdin
    is closed or /dev/null, ``--stdin none``: Open MPI 5 never forwards the end of input, so a
    rank 0 reading stdin would wait forever (and a closed fd 0 must not be inherited)."""
    if plan.stdin is not None:
        return plan
    try:
        st = os.fstat(0)
        null = os.stat(os.devnull)
    except OSError:
        return plan._replace(stdin="none")
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == null.st_rdev:
        return plan._replace(stdin="none")
    return plan


def run(plan: LaunchPlan, env: Mapping[str, str], run_dir: str, keep_tune: bool,
        command: Optional[List[str]] = None, hooks=None) -> int:
    """``command``: the argv to run instead of ``argv(plan)`` (``--launcher srun``);
    ``hooks``: one attempt of a long job (``mpilaunch/restart.py`` ``Attempt``: graceful stop,
    stall watchdog, the attempt's outcome)."""
    plan = stdin_target(plan)
    cmd: List[str] = list(command) if command is not None else argv(plan)
    collector = Collector() if hooks is None else hooks.collector()
    stop = {"signals": 0, "first": None}
    proc: Optional[subprocess.Popen] = None
    timers: List[threading.Timer] = []

    def on_signal(signum, _frame):
        stop["signals"] += 1
        if stop["first"] is None:
            stop["first"] = signum
        if proc is None or proc.poll() is not None:
            return  # before mpirun started: acted on right after Popen returns (see below)
        act(signum)

    def act(signum):
        """Stop the running job: the first stop, a repeated one, a forced one."""
        if hooks is not None and not stop.get("graceful") and hooks.on_stop(proc, signum, on_signal):
            stop["graceful"] = True      # --term-grace: the workers save first (restart.py)
        elif not stop.get("forwarded"):
            stop["forwarded"] = True
            print(f"mpilaunch: {signal.Signals(signum).name} received, stopping the job", file=sys.stderr, flush=True)
            _kill(proc, signal.SIGTERM)
            timer = threading.Timer(ESCALATE_AFTER, _kill, (proc, signal.SIGKILL))
            timer.daemon = True
            timer.start()
            timers.append(timer)
        elif stop["signals"] >= 3:
            print("mpilaunch: stopping now (SIGKILL to mpirun)", file=sys.stderr, flush=True)
            _kill(proc, signal.SIGKILL)
        else:
            print("mpilaunch: already stopping; signal again to force", file=sys.stderr, flush=True)

    previous = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        write_files(plan)
        if os.environ.get("MPILAUNCH_TEST_SIGNAL_BEFORE_START"):  # fault injection for the tests
            os.kill(os.getpid(), int(os.environ["MPILAUNCH_TEST_SIGNAL_BEFORE_START"]))
        if stop["first"] is not None:
            raise _StoppedBeforeStart()
        proc = subprocess.Popen(
            cmd, env={**env, **plan.extra_env}, stdin=_stdin_for(plan), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=_child_setup_for(prctl()), close_fds=True,
        )
        rundir.record_mpirun(run_dir, proc.pid)
        if stop["first"] is not None and not stop.get("forwarded") and not stop.get("graceful"):
            act(stop["first"])   # the stop came while Popen ran (the handler saw no mpirun yet)
        relays = [_Relay(proc.stderr, collector), _StdoutRelay(proc.stdout, collector)]
        if proc.stdin is not None:
            _StdinRelay(proc.stdin).start()   # not joined: it may wait on the terminal
        if plan.mpi.hydra:
            # -- Hydra (MPICH, Intel MPI): a rank exiting non-zero does not end the job there
            # (measured: mpiexec waits for every other rank), so the first failure a rank
            # reports ends it here, as Open MPI's mpirun would (mpilaunch/hydra.py).
            relays[0].on_failure = lambda: _kill(proc, signal.SIGTERM)
            if len(plan.hosts) > 1:   # a host lost mid-job: Hydra may wait forever on it
                from mpilaunch.hydra_report import ProxyWatch

                ProxyWatch(plan, proc.pid, lambda lost: _host_lost(proc, collector, lost, timers)).start()
        if hooks is not None:
            hooks.started(proc, _kill)
        for relay in relays:
            relay.start()
        rc = proc.wait()
        for relay in relays:
            relay.join(timeout=5)
    except _StoppedBeforeStart:
        rc = 0
    finally:
        for timer in timers:
            timer.cancel()
        if proc is not None and proc.poll() is None:  # an exception on our side: never leave it running
            _kill(proc, signal.SIGKILL)
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        close_ssh_masters(run_dir)
        remove_files(plan, run_dir, keep_tune)
        if proc is not None and proc.returncode is not None and proc.returncode < 0:
            rundir.drop_session_dir(proc.pid)   # a killed mpirun leaves it behind

    status = 128 - rc if rc < 0 else rc
    if plan.mpi.hydra and status != 0 and stop["first"] is None and len(plan.hosts) > 1:
        # -- Hydra names no lost host (MPICH: "control_cb assert (!closed) failed"): when it
        # reports a lost proxy, or no rank failed, the remote hosts whose ssh port stopped
        # answering are named (mpilaunch/hydra_report.py)
        from mpilaunch import hydra_report

        if not collector.unreachable and (collector.root_cause() is None
                                          or hydra_report.proxy_lost(collector._text)):
            collector.unreachable = hydra_report.unreachable_hosts(plan)
    if plan.mpi.hydra and status != 0 and stop["first"] is None:
        # -- Hydra: mpiexec's own status after our SIGTERM is 15 (MPICH) / 255 (Intel MPI);
        # report the failing rank's, as on Open MPI.
        root = collector.root_cause()
        if root is not None and (root.signal or root.code):
            status = 128 + root.signal if root.signal else root.code
    if (status == 0 or (plan.mpi.hydra and collector.unreachable)) and collector.lost_hosts():
        # Open MPI 5 sometimes exits 0 after losing a host: that job did not succeed; Hydra, a
        # host lost: 255 as MPICH's own, not mpiexec's status after our SIGTERM/SIGKILL
        status = 255
    if stop["first"] is not None:  # interrupted by the user: report the signal, as a shell would
        status = 128 + stop["first"]
    if hooks is not None:   # a stalled job's status; the attempt's outcome (restart.py)
        status = hooks.finish(status, collector, stop["first"])
    if status != 0:
        summary = render_summary(collector, status, stopped_by=stop["first"],
                                 mpirun_signal=-rc if rc < 0 and stop["first"] is None else None,
                                 scheduler=plan.scheduler)
        if hooks is not None:
            summary = hooks.summary(summary, collector)
        _Sink(2).write(summary.encode("utf-8", "replace"))
        if stop["first"] is not None and allocation.in_slurm(env):   # who sent the stop?
            cause = allocation.slurm_stop_cause(env)
            if cause:
                _Sink(2).write(f"  scheduler: {cause}\n".encode("utf-8", "replace"))
    return status


def _stdin_for(plan: LaunchPlan):
    """mpirun's stdin: ours, which it forwards to the ``--stdin`` rank(s) (rank 0 by default,
    as bare mpirun does); /dev/null for ``--stdin none`` (see :func:`stdin_target`)."""
    if plan.stdin == "none":
        return subprocess.DEVNULL
    try:
        os.fstat(0)
    except OSError:
        return subprocess.DEVNULL
    if os.isatty(0):
        # mpirun runs in its own process group (Ctrl-C reaches only us), so for the terminal
        # it is a background job: it never reads a tty stdin (measured: cpi waits forever on
        # 4.1 and 5.x). We read the terminal and feed mpirun a pipe.
        return subprocess.PIPE
    return None


class _StdinRelay(threading.Thread):
    """Our terminal -> mpirun's stdin pipe, until end of input (Ctrl-D) or mpirun is gone."""

    def __init__(self, pipe):
        super().__init__(name="stdin-relay", daemon=True)
        self.fd = pipe.fileno()
        self.pipe = pipe

    def run(self) -> None:
        try:
            while True:
                data = os.read(0, 1 << 16)
                if not data:
                    break
                while data:
                    data = data[os.write(self.fd, data):]
        except OSError:
            pass
        finally:
            try:
                self.pipe.close()
            except OSError:
                pass


class _StoppedBeforeStart(Exception):
    """A stop signal arrived before mpirun was started: start nothing."""


def _host_lost(proc: subprocess.Popen, collector: Collector, lost: List[str], timers) -> None:
    """Hydra lost the proxy of ``lost`` (its ssh ended, its ssh port does not answer): end the
    job (mpiexec's teardown may hang on the dead proxy: SIGKILL soon after)."""
    collector.unreachable = list(lost)
    print(f"mpilaunch: host {', '.join(lost)} lost (its ssh connection ended and its ssh port does not "
          "answer): stopping the job", file=sys.stderr, flush=True)
    _kill(proc, signal.SIGTERM)
    timer = threading.Timer(HOST_LOST_ESCALATE, _kill, (proc, signal.SIGKILL))
    timer.daemon = True
    timer.start()
    timers.append(timer)


def _kill(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
