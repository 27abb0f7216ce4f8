"""The report's wait-share chart and straggler facts (mpilaunch/report/waits.py), drawn from the
monitor's records as the launcher writes them (``wait_share`` per round, ``straggler``)."""
import re

from mpilaunch.report import html, model


def _records(recover=True):
    recs = [{"kind": "launcher_start", "t": 100.0, "v": 1},
            {"kind": "hosts", "t": 100.0, "np": 4, "hosts": [{"name": "h0", "slots": 4}]},
            {"kind": "attempt_start", "t": 100.5, "np": 4},
            {"kind": "starter_start", "t": 101.0, "program": "mpirun", "pid": 7}]
    for i in range(6):
        slow = 1 <= i <= 3
        recs.append({"kind": "wait_share", "t": 103.0 + 2 * i,
                     "shares": [0.6 if slow else 0.1, 0.62 if slow else 0.1,
                                0.02 if slow else 0.1, None]})
    recs.append({"kind": "straggler", "t": 105.0, "rank": 2, "host": "h0", "score": 0.59,
                 "others_wait": 0.61, "wait_share": 0.02, "slowdown": 2.44,
                 "hot_frame": "train.py:41 in load_batch", "recovered": False})
    if recover:
        recs.append({"kind": "straggler", "t": 111.0, "rank": 2, "host": "h0", "score": 0.0,
                     "others_wait": 0.1, "wait_share": 0.1, "slowdown": 1.0, "hot_frame": None,
                     "recovered": True})
    recs += [{"kind": "starter_exit", "t": 115.0, "returncode": 0},
             {"kind": "job_end", "t": 115.5, "status": 0, "attempts": 1}]
    for i, r in enumerate(recs):
        r.update(seq=i, attempt=0)
    return recs


def test_every_rank_with_a_share_has_a_line_and_the_straggler_is_red_and_spanned():
    page = html.render(model.build(_records()))
    lines = re.findall(r'class="wait-line" data-rank="(\d)" data-straggler="(\d)" points="([^"]*)"',
                       page)
    assert [(r, s, len(p.split())) for r, s, p in lines] == [("0", "0", 6), ("1", "0", 6),
                                                             ("2", "1", 6)]
    assert re.findall(r'class="straggler-span" data-rank="(\d)"', page) == ["2"]
    facts = re.findall(r'<p class="facts straggler" data-rank="2">(.*?)</p>', page)
    assert [re.sub(r"<[^>]+>", "", f) for f in facts] == [
        "straggler: rank 2 on host h0 from 5.0 s to 11.0 s: others waited 61% of the time for it "
        "(the job 2.44x as long); its time went to train.py:41 in load_batch"]


def test_a_straggler_to_the_end_is_spanned_to_the_attempts_end():
    page = html.render(model.build(_records(recover=False)))
    assert "from 5.0 s to 15.0 s" in page


def test_without_the_monitors_records_no_chart():
    recs = [r for r in _records() if r["kind"] not in ("wait_share", "straggler")]
    page = html.render(model.build(recs))
    assert 'class="waits"' not in page and "straggler" not in page
