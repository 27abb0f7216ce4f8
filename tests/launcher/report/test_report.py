"""``mpilaunch report``: an event record read back as phases (mpilaunch/report/model.py), the
self-contained page drawn from it (rows, root-cause marker, attempts, folding at 256 ranks,
nothing fetched), the PNG, and the command's one-line errors. The records are made by
events.py itself, as a launch writes them (tests/launcher/output/test_events.py runs real jobs)."""
import os
import re
import subprocess
import sys
from collections import namedtuple

import pytest

from mpilaunch.output import events
from mpilaunch.config.hostfile import Host
from mpilaunch.rank import status as rank_status
from mpilaunch.report import command, html, model
from mpilaunch.output.summary import parse_status_line

Cfg = namedtuple("Cfg", "hosts hosts_source np worker_log_name", defaults=(None,))
LR = namedtuple("LR", "log_dir max_restarts")
Plan = namedtuple("Plan", "np hosts log_dirs")


class _Backend:
    program, name = "mpirun", "Open MPI 5.0.11"


def _life(rank, host, event, t, pid=None, code=None, role="worker"):
    events.status(parse_status_line(rank_status.life_line(rank, host, role, event, pid=pid,
                                                          code=code, t=t).rstrip("\n")))


def _exit(rank, host, code, cause, sig=None):
    events.status(parse_status_line(rank_status.status_line(
        rank, host, "worker", "exit", code, sig, cause, f"/logs/worker_{rank}.log", ["x"]).rstrip("\n")))


def write_job(log_dir, hosts=2, per_host=2, fail=1, attempts=1, slow=None):
    """A job as the launcher records it: ranks over ``hosts`` hosts, rank ``fail`` failing
    in the last attempt (None: success), ``slow`` the rank that starts last."""
    np = hosts * per_host
    host_of = lambda r: f"node{r // per_host:03d}"   # noqa: E731
    events.start(Cfg(tuple(Host(host_of(h * per_host), per_host) for h in range(hosts)),
                     "the hostfile", np), LR(str(log_dir), attempts - 1), _Backend(), {})
    for k in range(attempts):
        last = k == attempts - 1
        own = os.path.join(str(log_dir), f"attempt{k}") if attempts > 1 else str(log_dir)
        events.attempt_start(k, Plan(np, (), (own,)))
        events.emit("starter_start", program="mpirun", pid=100 + k, argv=["mpirun"])
        for r in range(np):
            late = 0.5 if r == slow else 0.0
            _life(r, host_of(r), "up", None, pid=1000 + r)
            _life(r, host_of(r), "started", None, pid=2000 + r)
            if late:
                import time
                time.sleep(late)
        for r in range(np):
            _life(r, host_of(r), "output", None)
        if fail is not None or not last:
            _exit(fail if fail is not None else 0, host_of(fail or 0), 3, "self")
            for r in range(np):
                if r != (fail if fail is not None else 0):
                    _exit(r, host_of(r), 143, "terminated", 15)
        else:
            for r in range(np):
                _life(r, host_of(r), "exit", None, code=0)
        events.emit("starter_exit", returncode=3 if (fail is not None or not last) else 0)
        events.emit("teardown_end")
        status = 0 if last and fail is None else 3
        root = fail if fail is not None else 0
        events.emit("attempt_end", status=status, cause="rank failed", stopped_by=None,
                    lost_hosts=[], root=None if status == 0 else {
                        "rank": root, "host": host_of(root), "role": "worker", "code": 3,
                        "signal": None, "log": "/l", "message": None})
        if status:
            events.summary(f"mpilaunch: job failed (exit status 3)\n  root cause: rank {root}\n")
        if not last:
            events.emit("restart", next_attempt=k + 1, cause="rank failed", delay=0)
    events.job_end(0 if fail is None else 3, attempts)
    return str(log_dir)


def test_the_model_gives_every_rank_its_phases_in_order(tmp_path):
    job = model.load(write_job(tmp_path))
    assert job.finished and job.status == 3 and len(job.attempts) == 1
    att = job.last
    assert [r.rank for r in att.ranks()] == [0, 1, 2, 3]
    assert [h for h, _ in att.by_host()] == ["node000", "node001"]
    for row in att.ranks():
        names = [p.name for p in row.phases]
        assert names[:3] == [model.WAITING, model.ADAPTER, model.RUNNING]
        assert all(a.end <= b.start + 1e-9 for a, b in zip(row.phases, row.phases[1:]))
        assert row.pid == 2000 + row.rank and row.skew is not None
    root = [r for r in att.ranks() if r.root]
    assert [r.rank for r in root] == [1]
    assert [p.name for p in att.rows[(0, "worker")].phases][-1] == model.TEARDOWN
    assert model.TEARDOWN not in [p.name for p in root[0].phases]


def test_the_slowest_rank_and_host_are_named(tmp_path):
    job = model.load(write_job(tmp_path, hosts=3, per_host=2, slow=3))
    slow = job.last.slowest()
    assert slow["row"].rank == 4 or slow["row"].rank == 5   # started after rank 3's delay
    page = html.render(job)
    assert re.search(r"slowest to start: <b>rank [45]</b> on host <b>node002</b>", page)


def _rows(page):
    return re.findall(r'<g class="row (rank|sched)" data-rank="(\d+)" data-host="([^"]+)"', page)


def test_the_page_has_one_row_per_rank_and_the_marker_on_the_root_cause(tmp_path):
    page = html.render(model.load(write_job(tmp_path)))
    assert [(int(r), h) for _, r, h in _rows(page)] == [(0, "node000"), (1, "node000"),
                                                       (2, "node001"), (3, "node001")]
    assert re.findall(r'data-rank="(\d+)"[^>]*data-root="1"', page) == ["1"]
    assert page.count('class="root-marker"') == 1 and 'data-root-rank="1"' in page
    assert "mpilaunch: job failed (exit status 3)" in page
    # self-contained: nothing to fetch, no script
    assert not re.search(r"(src|href)=|<script|@import|url\(", page)


def test_restarts_are_separate_attempts(tmp_path):
    page = html.render(model.load(write_job(tmp_path, attempts=2, fail=None)))
    assert re.findall(r'<section class="attempt" data-attempt="(\d)"', page) == ["0", "1"]
    assert "attempt 1: succeeded" in page and "job succeeded (exit status 0)" in page


def test_256_ranks_fold_per_host_but_keep_every_row(tmp_path):
    page = html.render(model.load(write_job(tmp_path, hosts=32, per_host=8, fail=77)))
    assert len(_rows(page)) == 256
    blocks = re.findall(r'<details class="host[^"]*" data-host="([^"]+)"( open)?>', page)
    assert len(blocks) == 32
    assert [h for h, opened in blocks if opened] == ["node009"]   # the root cause's host
    assert page.count('<svg class="aggregate"') == 31
    assert len(page) < 3_000_000


def test_the_command_writes_the_page_and_the_png(tmp_path):
    log_dir = write_job(tmp_path / "logs")
    p = subprocess.run([sys.executable, "-m", "mpilaunch", "report", log_dir], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout == os.path.join(log_dir, "report.html") + "\n"
    assert oct(os.stat(p.stdout.strip()).st_mode & 0o777) == "0o644"
    pytest.importorskip("matplotlib")
    out = command.make(log_dir, str(tmp_path / "t.html"), png=True)
    assert out == [str(tmp_path / "t.html"), str(tmp_path / "t.png")]
    assert open(out[1], "rb").read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(out[1]) > 5000


@pytest.mark.parametrize("what, message", [
    ("missing", "LOG_DIR '{d}/missing': no such directory"),
    ("empty", "{d}/empty/events.jsonl: No such file or directory; give the LOG_DIR of a job"),
    ("junk", "{d}/junk/events.jsonl: no launcher_start record"),
])
def test_a_log_dir_without_a_record_is_one_line_and_exit_2(tmp_path, what, message):
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "events.jsonl").write_text("not json\n")
    p = subprocess.run([sys.executable, "-m", "mpilaunch", "report", str(tmp_path / what)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("mpilaunch: error: " + message.format(d=tmp_path))
    assert p.stderr.count("\n") == 1
    assert not (tmp_path / what / "report.html").exists()


def test_a_png_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    log_dir = write_job(tmp_path / "logs")
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # as if it were not installed
    from mpilaunch.errors import UsageError
    with pytest.raises(UsageError, match=r"pip install 'mpilaunch\[report\]'"):
        command.make(log_dir, png=True)
    assert os.path.exists(os.path.join(log_dir, "report.html"))   # the HTML needs nothing


def test_the_docs_list_the_report_options_from_the_table_and_show_a_report():
    from helpers import REPO
    from mpilaunch.config import options

    text = open(os.path.join(REPO, "docs", "OPTIONS.md"), encoding="utf-8").read()
    block = re.search(r"<!-- options:report -->\n(.*?)<!-- /options:report -->", text, re.S)
    assert block and block.group(1) == options.markdown_table("report", only_own=True)
    events = open(os.path.join(REPO, "docs", "EVENTS.md"), encoding="utf-8").read()
    assert "](report-screenshot.png)" in events          # the page shows a real report
    assert os.path.getsize(os.path.join(REPO, "docs", "report-screenshot.png")) > 20000
