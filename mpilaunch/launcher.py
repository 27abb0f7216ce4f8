"""Run and supervise mpirun: files, signals, exit status, failure summary, cleanup.

* mpirun starts in its own process group (a terminal's Ctrl-C reaches only us; we forward
  exactly one SIGTERM: a second signal makes Open MPI 4.1 exit and orphan its ranks) and
  with PR_SET_PDEATHSIG, so it is told to stop if we are killed.
* If mpirun has not ended ``ESCALATE_AFTER`` seconds after the forwarded signal, it is
  SIGKILLed; the rank adapters notice the loss of their parent (PDEATHSIG) and end too.
* stdout of the job passes straight through; stderr is relayed line by line so the adapters'
  status lines can be collected for the failure summary.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import List, Mapping, Optional

from mpilaunch import hostfile as hf
from mpilaunch import tune
from mpilaunch.plan import LaunchPlan, argv
from mpilaunch.summary import STATUS_PREFIX, Collector, parse_status_line, render_summary

ESCALATE_AFTER = 10.0
_PR_SET_PDEATHSIG = 1


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover
        return None


_LIBC = _libc()


def _child_setup() -> None:  # runs in the child between fork and exec
    os.setpgid(0, 0)
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def make_run_dir() -> str:
    """A private directory (0700) for the files of one job."""
    return tempfile.mkdtemp(prefix="mpilaunch-")


def write_files(plan: LaunchPlan) -> None:
    tune.write_atomic(plan.hostfile_path, hf.render_hostfile(plan.hosts))
    tune.write_atomic(plan.tune_path, plan.tune_text)


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

    def run(self) -> None:
        out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
        marker = STATUS_PREFIX.encode()
        for raw in iter(self.stream.readline, b""):
            if marker in raw:
                head, _, rest = raw.partition(marker)
                event = parse_status_line(STATUS_PREFIX + rest.decode("utf-8", "replace").rstrip("\r\n"))
                if event is not None:
                    self.collector.feed_status(event)
                    raw = head + (b"\n" if head.strip() else b"")
                    if not head.strip():
                        continue
            self.collector.feed_text(raw.decode("utf-8", "replace"))
            if out is not None:
                out.write(raw)
                out.flush()
            else:  # pragma: no cover
                sys.stderr.write(raw.decode("utf-8", "replace"))


def run(plan: LaunchPlan, env: Mapping[str, str], run_dir: str, keep_tune: bool) -> int:
    cmd: List[str] = argv(plan)
    collector = Collector()
    stop = {"signals": 0, "first": None}
    proc: Optional[subprocess.Popen] = None
    timers: List[threading.Timer] = []

    def on_signal(signum, _frame):
        stop["signals"] += 1
        if stop["first"] is None:
            stop["first"] = signum
        if proc is None or proc.poll() is not None:
            return
        if stop["signals"] == 1:
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
        proc = subprocess.Popen(
            cmd, env={**env, **plan.extra_env}, stdin=subprocess.DEVNULL, stdout=None, stderr=subprocess.PIPE,
            preexec_fn=_child_setup, close_fds=True,
        )
        relay = _Relay(proc.stderr, collector)
        relay.start()
        rc = proc.wait()
        relay.join(timeout=5)
    finally:
        for timer in timers:
            timer.cancel()
        if proc is not None and proc.poll() is None:  # an exception on our side: never leave it running
            _kill(proc, signal.SIGKILL)
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        remove_files(plan, run_dir, keep_tune)

    status = 128 - rc if rc < 0 else rc
    if stop["first"] is not None:  # interrupted by the user: report the signal, as a shell would
        status = 128 + stop["first"]
    if status != 0:
        sys.stderr.write(render_summary(collector, status))
        sys.stderr.flush()
    return status


def _kill(proc: subprocess.Popen, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass
