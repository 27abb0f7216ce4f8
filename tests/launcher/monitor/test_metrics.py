"""``--metrics-port``'s page (mpilaunch/monitor/metrics.py), exact: the series a Prometheus
scrape reads of each rank, and the server's refusals (one line, before anything starts)."""
import socket
import urllib.request

import pytest

from helpers.ports import free_port
from mpilaunch.errors import UsageError
from mpilaunch.monitor import metrics
from mpilaunch.monitor.model import JobView, RankView

pytest.importorskip("prometheus_client")

VIEW = JobView(1000.0, 2, 2, 2, 2.0, "py-spy", [
    RankView(0, "h1", "worker", "running", 12.5, 98.0, 300 * 2 ** 20, 1.5, 0.64,
             "train.py:50 in step", False, 0.12, True),
    RankView(0, "h1", "scheduler", "running", 1.0, None, 50 * 2 ** 20, None, None, None),
    RankView(1, "h2", "worker", "exited 3", 3.25, 20.0, 310 * 2 ** 20, 0.25, 0.02,
             "train.py:41 in load_batch", True, 0.91, False),
    RankView(2, "h3", "worker", "starting", 0.0, None, 0, None, None, None),
])

PAGE = '''\
# HELP mpilaunch_up 1 while the rank's process runs and its adapter is connected
# TYPE mpilaunch_up gauge
mpilaunch_up{host="h1",rank="0",role="worker"} 1.0
mpilaunch_up{host="h1",rank="0",role="scheduler"} 1.0
mpilaunch_up{host="h2",rank="1",role="worker"} 0.0
mpilaunch_up{host="h3",rank="2",role="worker"} 1.0
# HELP mpilaunch_cpu_seconds_total CPU time (user+system) of the rank's processes and their children over the job (restarts add to it)
# TYPE mpilaunch_cpu_seconds_total counter
mpilaunch_cpu_seconds_total{host="h1",rank="0",role="worker"} 12.5
mpilaunch_cpu_seconds_total{host="h1",rank="0",role="scheduler"} 1.0
mpilaunch_cpu_seconds_total{host="h2",rank="1",role="worker"} 3.25
# HELP mpilaunch_rss_bytes resident memory of the process and its children
# TYPE mpilaunch_rss_bytes gauge
mpilaunch_rss_bytes{host="h1",rank="0",role="worker"} 3.145728e+08
mpilaunch_rss_bytes{host="h1",rank="0",role="scheduler"} 5.24288e+07
mpilaunch_rss_bytes{host="h2",rank="1",role="worker"} 3.2505856e+08
# HELP mpilaunch_last_output_timestamp_seconds when the process last wrote an output line (Unix time)
# TYPE mpilaunch_last_output_timestamp_seconds gauge
mpilaunch_last_output_timestamp_seconds{host="h1",rank="0",role="worker"} 998.5
mpilaunch_last_output_timestamp_seconds{host="h2",rank="1",role="worker"} 999.75
# HELP mpilaunch_wait_ratio share of the last interval's stack samples waiting for the other ranks (0-1)
# TYPE mpilaunch_wait_ratio gauge
mpilaunch_wait_ratio{host="h1",rank="0",role="worker"} 0.64
mpilaunch_wait_ratio{host="h2",rank="1",role="worker"} 0.02
# HELP mpilaunch_straggler 1 while the rank holds the job back (the straggler rule)
# TYPE mpilaunch_straggler gauge
mpilaunch_straggler{host="h1",rank="0",role="worker"} 0.0
mpilaunch_straggler{host="h2",rank="1",role="worker"} 1.0
mpilaunch_straggler{host="h3",rank="2",role="worker"} 0.0
# HELP mpilaunch_straggler_score the straggler rule's score of the rank
# TYPE mpilaunch_straggler_score gauge
mpilaunch_straggler_score{host="h1",rank="0",role="worker"} 0.12
mpilaunch_straggler_score{host="h2",rank="1",role="worker"} 0.91
# HELP mpilaunch_attempt the running attempt (0: the first)
# TYPE mpilaunch_attempt gauge
mpilaunch_attempt 2.0
# HELP mpilaunch_restarts_total restarts of the job so far
# TYPE mpilaunch_restarts_total counter
mpilaunch_restarts_total 2.0
# HELP mpilaunch_ranks the job's world size
# TYPE mpilaunch_ranks gauge
mpilaunch_ranks 2.0
'''


def test_the_page_has_every_rank_and_role_labelled_and_leaves_out_what_was_not_measured():
    # rank 2 not sampled yet: up, not a straggler, no CPU/memory/output/wait series (not a 0)
    assert metrics.text(VIEW) == PAGE


def test_no_view_yet_is_an_empty_page():
    assert metrics.text(None) == ""


class Board:
    def __init__(self, view):
        self.current = view

    def view(self):
        return self.current


def test_the_server_serves_the_board_it_follows_at_every_scrape(capsys):
    port = int(free_port())
    exporter = metrics.Exporter("127.0.0.1", port)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        assert exporter.url == url
        assert urllib.request.urlopen(url, timeout=10).read() == b""
        board = Board(VIEW)
        exporter.follow(board)
        assert urllib.request.urlopen(url, timeout=10).read().decode() == PAGE
        board.current = JobView(1.0, 3, 3, 0, 2.0, "py-spy", [])   # the next attempt's
        assert "mpilaunch_attempt 3.0\n" in urllib.request.urlopen(url, timeout=10).read().decode()
        exporter.follow(None)
        assert "serves no series: the monitor is off" in capsys.readouterr().err
    finally:
        exporter.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10)


def test_a_port_in_use_is_one_line_naming_the_flag():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        with pytest.raises(UsageError) as err:
            metrics.Exporter("127.0.0.1", port, "--metrics-port")
    assert str(err.value) == (f"--metrics-port={port}: cannot serve /metrics on 127.0.0.1:{port}: "
                              "Address already in use; give a free port")

