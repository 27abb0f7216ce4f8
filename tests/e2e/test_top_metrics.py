"""The live view of a running job (docs/MONITOR.md): ``mpilaunch top`` from a second process
(``--once``, and live in a terminal: drawn in place, ``q`` quits), and ``--metrics-port``
scraped by a real Prometheus server (the Debian package's binary, on a free port) whose query
API gives the series back. The job: 4 ranks that print, then wait for the test's release file;
the monitor samples every second. Every process the test started ends with it."""
import fcntl
import json
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import urllib.parse
import urllib.request

import pytest

from helpers import REPO
from helpers.launch import clean_env, mpilaunch_argv, run_cli
from helpers.ports import free_port
from helpers.procs import alive, descendants, wait_for

WAITER = r'''
import os, sys, time
rank = os.environ["RANK"]
print("rank", rank, "up", flush=True)
open(os.path.join(sys.argv[1], "up_" + rank), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "release")):
    time.sleep(0.05)
'''
NP = 4
HOST = os.uname().nodename


def start(tmp_path, *more):
    script = tmp_path / "waiter.py"
    script.write_text(WAITER)
    argv = mpilaunch_argv("-np", str(NP), "--oversubscribe", "--no-scheduler", "--master_port", "0",
                          "--sample-interval", "5", *more, "--log_dir", str(tmp_path / "logs"),
                          str(script), str(tmp_path))
    return subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def top_once(log_dir):
    return subprocess.run(mpilaunch_argv("top", "--once", str(log_dir)), env=clean_env(), cwd=REPO,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def rows(stdout):
    """``top --once``'s table -> {rank: the row's cells} (workers)."""
    lines = stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("RANK "))
    cells = [line.split() for line in lines[at + 1:]]
    return {int(c[0]): c for c in cells if c and c[0].isdigit() and c[2] == "worker"}


def sampled(log_dir, n=NP):
    """``top --once`` once every rank has been sampled (its RSS is known), else None."""
    got = top_once(log_dir)
    if got.returncode != 0:
        return None
    table = rows(got.stdout)
    return got if len(table) == n and all(c[3] == "running" and c[5] != "0" for c in table.values()) else None


def finish(proc, tmp_path):
    kids = descendants(proc.pid)
    (tmp_path / "release").touch()
    try:
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert wait_for(lambda: not alive(kids), 10), alive(kids)
    return err


def test_top_once_shows_every_rank_its_host_and_state_and_the_ended_job_is_one_line(tmp_path):
    proc = start(tmp_path)
    try:
        got = wait_for(lambda: sampled(tmp_path / "logs"), 120)
    except BaseException:
        proc.kill()
        raise
    try:
        assert got, top_once(tmp_path / "logs")
        head = got.stdout.splitlines()[0]
        assert head.startswith(f"mpilaunch top: {NP} ranks, attempt 0, restarts 0, sampled every 5 s"), got.stdout
        table = rows(got.stdout)
        assert sorted(table) == list(range(NP))
        for r, cells in table.items():
            assert cells[1:4] == [HOST, "worker", "running"], got.stdout
            assert "straggler" not in cells, got.stdout      # every rank waits alike
    finally:
        finish(proc, tmp_path)
    ended = top_once(tmp_path / "logs")
    assert (ended.returncode, ended.stdout) == (2, ""), ended.stderr
    assert ended.stderr == (f"mpilaunch: error: no running mpilaunch job writes to {tmp_path / 'logs'} "
                            "(no .mpilaunch-stacks there: the job has ended, or it was started "
                            "with another --log_dir)\n")


def test_top_in_a_terminal_redraws_in_place_and_q_quits_leaving_the_table(tmp_path):
    proc = start(tmp_path)
    try:
        assert wait_for(lambda: sampled(tmp_path / "logs"), 120), top_once(tmp_path / "logs")
        pid, fd = pty.fork()
        if pid == 0:   # the child: `mpilaunch top LOG_DIR` on a terminal of 100 x 30
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
            os.chdir(REPO)
            os.execve(sys.executable, mpilaunch_argv("top", str(tmp_path / "logs")), clean_env())
        screen = b""
        try:
            # two tables drawn from the top left corner of the alternate screen
            def drawn():
                nonlocal screen
                while select.select([fd], [], [], 0.1)[0]:
                    screen += os.read(fd, 65536)
                return screen.count(b"\x1b[Hmpilaunch top: ") >= 2
            assert wait_for(drawn, 60), screen
            os.write(fd, b"q")
            assert wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, 30)
            pid = 0
            while select.select([fd], [], [], 0.1)[0]:
                try:
                    more = os.read(fd, 65536)
                except OSError:
                    break
                if not more:
                    break
                screen += more
        finally:
            if pid:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            os.close(fd)
    except BaseException:
        proc.kill()
        raise
    finish(proc, tmp_path)
    text = screen.decode()
    assert text.startswith("\x1b[?1049h"), text[:80]        # the alternate screen, as htop
    left = text.split("\x1b[?1049l", 1)[1]                   # back on the user's screen:
    assert left.startswith(f"mpilaunch top: {NP} ranks"), left  # the last table stays
    assert sorted(rows(left.replace("\r\n", "\n"))) == list(range(NP)), left


PROM_CONFIG = """\
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: mpilaunch
    static_configs:
      - targets: ["127.0.0.1:{port}"]
"""


def query(prom_port, expr):
    url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)["data"]["result"]
    except OSError:
        return []


@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="no prometheus binary (scripts/test.sh installs the Debian package)")
def test_prometheus_scrapes_every_rank_labelled_and_reads_it_back(tmp_path):
    pytest.importorskip("prometheus_client")
    metrics_port, prom_port = free_port(), free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(PROM_CONFIG.format(port=metrics_port))
    proc = start(tmp_path, "--metrics-port", metrics_port)
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        def all_up():
            got = query(prom_port, 'mpilaunch_up{job="mpilaunch",role="worker"} == 1')
            return got if len(got) == NP else None
        up = wait_for(all_up, 120, interval=0.5)
        assert up, (tmp_path / "prometheus.log").read_text()[-2000:]
        labels = sorted((s["metric"]["rank"], s["metric"]["host"]) for s in up)
        assert labels == [(str(r), HOST) for r in range(NP)]
        rss = wait_for(lambda: [s for s in query(prom_port, "mpilaunch_rss_bytes > 0")
                                if s["metric"]["role"] == "worker"], 60, interval=0.5)
        assert sorted(s["metric"]["rank"] for s in rss) == [str(r) for r in range(NP)]
        lag = query(prom_port, "sum(mpilaunch_straggler)")
        assert lag and float(lag[0]["value"][1]) == 0.0, lag     # nobody holds this job back
        attempt = query(prom_port, "mpilaunch_attempt")
        assert [float(a["value"][1]) for a in attempt] == [0.0]
    except BaseException:
        proc.kill()
        raise
    finally:
        prom.terminate()
        prom.wait(30)
    finish(proc, tmp_path)
    assert prom.returncode == 0, (tmp_path / "prometheus.log").read_text()[-2000:]


def test_a_metrics_port_in_use_is_one_line_and_nothing_starts(tmp_path):
    import socket

    script = tmp_path / "never.py"
    script.write_text(f"open({str(tmp_path / 'ran')!r}, 'w')\n")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        port = held.getsockname()[1]
        got, tmpdir = run_cli(["-np", "2", "--oversubscribe", "--master_port", "0", "--metrics-port", str(port),
                               "--log_dir", str(tmp_path / "logs"), str(script)], tmp_path)
    assert got.returncode == 2, got.stderr
    assert got.stderr == (f"mpilaunch: error: --metrics-port={port}: cannot serve /metrics on "
                          f"127.0.0.1:{port}: Address already in use; give a free port\n")
    assert not (tmp_path / "ran").exists() and os.listdir(tmpdir) == []
    bad, _ = run_cli(["--master_port", "0", "--metrics-port", "http", str(script)], tmp_path)
    assert (bad.returncode, bad.stderr) == (2, "mpilaunch: error: --metrics-port='http': not a whole "
                                               "number; give a port between 1 and 65535\n")


def test_top_of_a_job_with_the_monitor_off_is_one_line_exit_1(tmp_path):
    """--sample-interval 0: the launcher runs and answers at its socket, but keeps no view."""
    proc = start(tmp_path, "--sample-interval", "0")
    try:
        assert wait_for(lambda: all((tmp_path / f"up_{r}").exists() for r in range(NP)), 120)
        assert wait_for(lambda: (tmp_path / "logs" / ".mpilaunch-stacks").exists(), 10)
        got = top_once(tmp_path / "logs")
    except BaseException:
        proc.kill()
        raise
    finish(proc, tmp_path)
    assert (got.returncode, got.stdout) == (1, ""), got.stderr
    assert got.stderr == ("mpilaunch: this job keeps no view of its ranks: its monitor is off "
                          "(--sample-interval 0)\n")


SLOW = r'''
import datetime, os, sys, time
import torch
import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])
dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=5))


def load_batch():
    if rank == 2:
        time.sleep(0.04)
    x = torch.ones(128, 128)
    return x @ x / 128


stop = torch.zeros(1)
while not stop[0]:
    dist.all_reduce(load_batch())
    stop[0] = float(os.path.exists(os.path.join(out, "release")))
    dist.all_reduce(stop)
dist.destroy_process_group()
'''
needs_torch = pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode != 0,
    reason="torch not installed")


@needs_torch
@pytest.mark.skipif(shutil.which("prometheus") is None,
                    reason="no prometheus binary (scripts/test.sh installs the Debian package)")
def test_the_slow_rank_reads_straggler_in_top_and_in_prometheus(tmp_path):
    """A torch/gloo job whose rank 2 sleeps 40 ms more per step: top's row of rank 2 (and only
    it) says straggler, its first line names it, and Prometheus reads mpilaunch_straggler 1 for
    rank 2 alone. The monitor samples every 5 s (enough stack samples for the rule a round)."""
    pytest.importorskip("prometheus_client")
    script = tmp_path / "slow.py"
    script.write_text(SLOW)
    metrics_port, prom_port = free_port(), free_port()
    cfg = tmp_path / "prometheus.yml"
    cfg.write_text(PROM_CONFIG.format(port=metrics_port))
    argv = mpilaunch_argv("-np", str(NP), "--oversubscribe", "--no-scheduler", "--master_port", "0",
                          "--sample-interval", "5", "--metrics-port", metrics_port,
                          "--log_dir", str(tmp_path / "logs"), str(script), str(tmp_path))
    proc = subprocess.Popen(argv, env=clean_env(), cwd=REPO, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    prom = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        def named():
            got = top_once(tmp_path / "logs")
            table = rows(got.stdout) if got.returncode == 0 else {}
            return got if len(table) == NP and "straggler" in table[2] else None
        got = wait_for(named, 180, interval=1.0)
        assert got, top_once(tmp_path / "logs").stdout
        table = rows(got.stdout)
        assert [r for r, cells in table.items() if "straggler" in cells] == [2], got.stdout
        assert f"straggler: rank 2 on {HOST}" in got.stdout.splitlines()[0], got.stdout
        lagging = wait_for(lambda: query(prom_port, "mpilaunch_straggler == 1"), 60, interval=0.5)
        assert [(s["metric"]["rank"], s["metric"]["host"]) for s in lagging] == [("2", HOST)]
    except BaseException:
        proc.kill()
        raise
    finally:
        prom.terminate()
        prom.wait(30)
    finish(proc, tmp_path)
