"""An in-place restart in ``mpilaunch report`` (report/restarts.py, model.py, html.py): where its
time went (the restart_phases record's detection, teardown, start and to first output, each to
its latest rank) and what each rank's new worker was, read back from a recorded event record.

restart_in_place.jsonl is the events.jsonl of a real job (2 ranks, torch + gloo under Open MPI 5,
``--max_restarts 1``): rank 1 left with exit code 3 after 12 s and both ranks restarted in place
onto their spares. In place, the new workers' lines come while the record is still at attempt 0
and attempt 1 has no attempt_start: the report moves them to attempt 1 and starts it at the
failure."""
import json
import os
import re

from mpilaunch.report import html, model

RECORD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart_in_place.jsonl")
LINE = ("restarted in place from attempt 0 in 0.100 s: detection 0.053 s (rank 0), teardown "
        "0.039 s (rank 0), start 0.003 s (rank 0), to first output 0.005 s (rank 1); new "
        "workers: spare (ready): ranks 0-1")


def _records(**spare_of_rank):
    """The recorded job, with a rank's spare line changed (rank -> event) or dropped (None)."""
    out = []
    for line in open(RECORD, encoding="utf-8"):
        rec = json.loads(line)
        rank = f"r{rec.get('rank')}"
        if rec["kind"] == "rank_status" and rec.get("event", "").startswith("spare-") \
                and rank in spare_of_rank:
            if spare_of_rank[rank] is None:
                continue
            rec["event"] = spare_of_rank[rank]
        out.append(rec)
    return out


def test_the_restart_is_read_into_the_attempt_it_started():
    job = model.load(RECORD)
    a0, a1 = job.attempts
    r = a1.restart
    assert a0.restarted is r and (a0.in_place, a1.in_place) == (False, True)
    assert (r.from_attempt, r.attempt, r.total, r.spare) == (0, 1, 0.1, {"ready": 2})
    assert r.phases == {"detection": 0.053, "teardown": 0.039, "start": 0.003, "first_output": 0.005}
    assert r.cause == "rank 1 (worker) on host vm: exit code 3"
    assert [r.latest(p) for p in model.RESTART_PHASES] == [0, 0, 0, 1]
    assert r.text(2) == LINE
    # attempt 0's rows end at the failure, where attempt 1 starts: its rows restart, then run
    assert a0.end == a1.start == r.failed
    assert [[p.name for p in row.phases] for row in a0.ranks()] == [
        [model.WAITING, model.ADAPTER, model.RUNNING]] * 2
    assert [[p.name for p in row.phases] for row in a1.ranks()] == [
        [model.RESTARTING, model.RUNNING]] * 2
    assert [round(row.started - a1.start, 3) for row in a1.ranks()] == [0.096, 0.056]
    assert [row.new_worker for row in a1.ranks()] == ["spare (ready)"] * 2
    assert [row.new_worker for row in a0.ranks()] == [None, None]
    # the failure that restarted it, named by the restart-in-place line (no attempt_end in place)
    assert [row.rank for row in a0.ranks() if row.root] == [1] and a0.failed_in_place == 1
    assert [row.rank for row in a1.ranks() if row.root] == []


def test_the_page_shows_the_restart_in_the_attempt_it_started():
    page = html.render(model.load(RECORD))
    assert re.findall(r'<h2 class="(\w+)">(.*?)</h2>', page) == [
        ("bad", "attempt 0: restarted in place: rank 1 (worker) on host vm: exit code 3"),
        ("ok", "attempt 1: succeeded")]
    assert re.findall(r'<p class="facts restart"[^>]*>(.*?)</p>', page) == [LINE]
    assert '<p class="facts restart" data-from="0" data-attempt="1" data-total="0.1">' in page
    assert re.findall(r'<rect class="restart-phase (\w+)".*?<title>(.*?)</title>', page) == [
        ("detection", "detection 0.053 s, its latest rank 0: 0.000-0.053 s"),
        ("stopping", "teardown 0.039 s, its latest rank 0: 0.053-0.092 s"),
        ("start", "start 0.003 s, its latest rank 0: 0.092-0.095 s"),
        ("first_output", "to first output 0.005 s, its latest rank 1: 0.095-0.100 s")]
    assert re.findall(r'<g class="row rank" data-rank="(\d)"[^>]*data-new-worker="([^"]*)"',
                      page) == [("0", "spare (ready)"), ("1", "spare (ready)")]
    assert re.findall(r'data-rank="(\d)"[^>]*data-root="1"', page) == ["1"]   # in attempt 0
    # an in-place attempt has no starter of its own: no "slowest to start ... after mpirun"
    assert page.count('class="slowest"') == 1


def test_a_fresh_worker_and_a_restart_without_its_phases():
    job = model.build(_records(r0="spare-busy", r1=None))
    assert job.attempts[1].restart.text(2) == LINE.replace(
        "spare (ready): ranks 0-1", "fresh (spare busy): rank 0; fresh: rank 1")
    quiet = [rec for rec in _records() if rec["kind"] != "restart_phases"]
    r = model.build(quiet).attempts[1].restart
    assert r.text(2) == ("restarted in place from attempt 0; its phases were not recorded; new "
                         "workers: spare (ready): ranks 0-1")
    assert r.spans() == [] and "restart-phase" not in html.render(model.build(quiet))


def test_a_job_without_a_restart_draws_none():
    records = [rec for rec in _records() if rec.get("attempt") == 0 and rec["kind"] not in (
        "rank_status", "restart", "restart_phases")]
    job = model.build(records)
    assert [a.restart for a in job.attempts] == [None]
    page = html.render(job)
    assert not re.search(r"facts restart|restart-phase|restarting in place|data-new-worker", page)


def test_the_png_draws_the_restart_as_a_row_of_its_attempt():
    from mpilaunch.report import png

    a0, a1 = model.load(RECORD).attempts
    assert [label for label, _, _ in png._rows(a1)] == ["restart 0 -> 1", "vm rank 0", "vm rank 1"]
    assert [p.name for p in png._rows(a1)[0][1]] == ["detection", "stopping", "start", "first_output"]
    assert [label for label, _, _ in png._rows(a0)] == ["mpirun", "vm rank 0", "vm rank 1"]
