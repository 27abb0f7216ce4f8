"""The attempt protocol: what the supervision of one attempt (``starter.run_attempt``) asks of
the attempt it runs. ``Attempt`` is a plain launch; ``longrun.restart.LongRunAttempt`` fills the
hooks in for the graceful stop, the stall watchdog and restarts in place; the loop that starts
one attempt after another is ``longrun.attempts.run_job``."""
from __future__ import annotations

import signal

from mpilaunch.output.summary import Collector, root_text

LINGER = 3.0    # an adapter's own teardown: 2 s to SIGKILL its workers, then its report


class Attempt:
    """One attempt of the job. The defaults are a plain launch. In the order they are called:

    linger()                    -> s to wait for adapters still running after the starter
    collector(backend)          -> the Collector the starter's output goes into
    started(job)                   the starter runs (``starter.Job``: kill, end, later)
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
