"""``--metrics-port PORT``: the job's monitor (``board.py``'s :class:`JobView`) in Prometheus's
text format at ``http://ADDR:PORT/metrics``, one set of series per rank and role labelled
``rank``, ``host``, ``role``, and the job's attempt and restarts (docs/MONITOR.md lists them).

Served by the well-kept ``prometheus-client`` (its exposition and its threaded HTTP server),
imported only when the flag is given: imports a plain launch does not pay (docs/MONITOR.md,
"Cost"). Every scrape reads the board's view at that moment; nothing is kept
here. The exporter lives across the job's attempts (``attempts/loop.py``): between two, the
last attempt's ranks are served down.
"""
from __future__ import annotations

import errno
import sys
from typing import TYPE_CHECKING, Any, Iterator, List, Optional

from mpilaunch.errors import UsageError
from mpilaunch.monitor.model import JobView

if TYPE_CHECKING:
    from mpilaunch.monitor.board import Board

LABELS = ("rank", "host", "role")


def families(view: JobView) -> List[Any]:
    """The metric families of ``view``, in the order /metrics lists them."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def gauge(name: str, doc: str, unit: str = "") -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, labels=LABELS, unit=unit)

    up = gauge("mpilaunch_up", "1 while the rank's process runs and its adapter is connected")
    cpu = CounterMetricFamily("mpilaunch_cpu_seconds", "CPU time (user+system) of the rank's "
                              "processes and their children over the job (restarts add to it)",
                              labels=LABELS)
    rss = gauge("mpilaunch_rss_bytes", "resident memory of the process and its children")
    out = gauge("mpilaunch_last_output_timestamp_seconds",
                "when the process last wrote an output line (Unix time)")
    # Prometheus names a 0-1 share ``_ratio`` (its naming conventions)
    wait = gauge("mpilaunch_wait_ratio", "share of the last interval's stack samples waiting "
                 "for the other ranks (0-1)")
    lag = gauge("mpilaunch_straggler", "1 while the rank holds the job back (the straggler rule)")
    score = gauge("mpilaunch_straggler_score", "the straggler rule's score of the rank")
    for r in view.ranks:
        labels = [str(r.rank), r.host, r.role]
        up.add_metric(labels, 1 if r.up else 0)
        if r.rss > 0:   # a process sampled at least once
            cpu.add_metric(labels, r.cpu_s)
            rss.add_metric(labels, r.rss)
        if r.output_age is not None:
            out.add_metric(labels, round(view.t - r.output_age, 3))
        if r.wait_share is not None:
            wait.add_metric(labels, r.wait_share)
        if r.role == "worker":
            lag.add_metric(labels, 1 if r.straggler else 0)
        if r.score is not None:
            score.add_metric(labels, r.score)
    attempt = GaugeMetricFamily("mpilaunch_attempt", "the running attempt (0: the first)",
                                value=view.attempt)
    restarts = CounterMetricFamily("mpilaunch_restarts", "restarts of the job so far",
                                   value=view.restarts)
    ranks = GaugeMetricFamily("mpilaunch_ranks", "the job's world size", value=view.np)
    return [up, cpu, rss, out, wait, lag, score, attempt, restarts, ranks]


def text(view: Optional[JobView]) -> str:
    """What a scrape of ``view`` reads (the unit tests' exact output)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(view))
    return generate_latest(registry).decode()


class _Fixed:
    def __init__(self, view: Optional[JobView]) -> None:
        self.fixed = view

    def describe(self) -> List[Any]:    # nothing to collect at registration
        return []

    def collect(self) -> Iterator[Any]:
        view = self.current()
        if view is not None:
            yield from families(view)

    def current(self) -> Optional[JobView]:
        return self.fixed


class Exporter(_Fixed):
    """``/metrics`` on ``addr``:``port``, listening from construction (a port in use: one
    UsageError naming ``flag``, nothing served) until :meth:`close`; serves the board it
    :meth:`follow` s (nothing before)."""

    def __init__(self, addr: str, port: int, flag: str = "--metrics-port") -> None:
        super().__init__(None)
        self.board: Optional[Board] = None
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            raise UsageError(f"{flag}: serving /metrics needs prometheus-client: "
                             "pip install 'mpilaunch[metrics]'") from None

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        try:
            self.httpd, self.thread = start_http_server(port, addr=addr, registry=registry)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise UsageError(f"{flag}={port}: cannot serve /metrics on {addr}:{port}: {why}"
                             + ("; give a free port" if exc.errno == errno.EADDRINUSE else "")) from None
        self.url = f"http://{addr if ':' not in addr else f'[{addr}]'}:{port}/metrics"

    def follow(self, board: Optional[Board]) -> None:
        """Serve ``board.view()`` at every scrape (``board``: monitor/board.py's; None: the
        monitor is off, nothing to serve)."""
        if board is None:
            print(f"mpilaunch: {self.url} serves no series: the monitor is off "
                  "(--sample-interval 0, or --exec)", file=sys.stderr, flush=True)
        self.board = board

    def current(self) -> Optional[JobView]:
        board = self.board
        return board.view() if board is not None else None

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
