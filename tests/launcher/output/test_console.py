"""The console's collapsing and budget (output/console.py), exact bytes in and out; the real
launches: tests/e2e/test_console_logs.py."""
import os
import threading

import pytest

from mpilaunch.output import console
from mpilaunch.output.console import Budget, Collapser


@pytest.mark.parametrize("ranks, text", [([5], "5"), ([0, 2, 5], "0,2,5"), (range(48), "0-47"),
                                         ([0, 1, 3, 4, 5, 9], "0,1,3-5,9"), ([3, 1, 2, 2], "1-3")])
def test_ranks_text(ranks, text):
    assert console.ranks_text(ranks) == text


def test_a_long_rank_list_is_cut_with_its_count():
    assert console.ranks_label(list(range(0, 100, 2))) == \
        b"0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,...,98 (50 ranks)"
    assert console.ranks_label(list(range(1024))) == b"0-1023"
    assert console.ranks_label([5, 1]) == b"1,5"


@pytest.mark.parametrize("line, parsed", [(b"[rank7] x\n", (7, b"x\n")), (b"[rank12] \n", (12, b"\n")),
                                          (b"[rankx] x\n", None), (b"[rank7]x\n", None), (b"rank7 x\n", None),
                                          (b"[rank" + b"1" * 20 + b"] x\n", None)])
def test_split_rank(line, parsed):
    assert console.split_rank(line) == parsed


def feed(c, lines, t):
    for line in lines:
        c.add(line, t)


def test_the_same_line_from_every_rank_is_shown_once_as_soon_as_all_printed_it():
    c = Collapser(window=1.0, expected=3)
    feed(c, [b"[rank0] cfg a\n", b"[rank1] cfg a\n", b"[rank0] cfg b\n"], 0.0)
    assert c.take(0.1) == b""                        # rank 2 has not printed "cfg a" yet
    feed(c, [b"[rank2] cfg a\n", b"[rank1] cfg b\n"], 0.2)
    assert c.take(0.2) == b"[rank0-2] cfg a\n"      # complete: no wait for the window
    assert c.due() == 1.0
    assert c.take(0.99) == b""
    assert c.take(1.0) == b"[rank0,1] cfg b\n"      # rank 2 never printed it: the window
    assert c.take(5.0) == b"" and c.due() is None and c.held_bytes == 0 and c.open == {}


def test_a_line_only_one_rank_prints_waits_at_most_the_window_and_keeps_its_place():
    c = Collapser(window=0.5, expected=4)
    feed(c, [b"[rank0] same\n"], 0.0)
    feed(c, [b"[rank2] only mine\n", b"not a rank's line\n"], 0.3)
    feed(c, [b"[rank1] same\n"], 0.4)
    assert c.take(0.49) == b""
    # "same" first (it came first), then rank 2's own line and the starter's, in their order
    assert c.take(0.5) == b"[rank0,1] same\n"
    assert c.take(0.79) == b""
    assert c.take(0.8) == b"[rank2] only mine\nnot a rank's line\n"


def test_a_line_no_rank_can_join_any_more_is_shown_before_the_window():
    c = Collapser(window=60.0, expected=3)
    feed(c, [b"[rank0] loss 0.1\n", b"[rank1] loss 0.2\n", b"[rank2] loss 0.3\n"], 0.0)
    # rank 0 might still print "loss 0.2" or "loss 0.3" and join those; nobody can join its own
    assert c.take(0.0) == b"[rank0] loss 0.1\n"
    feed(c, [b"[rank0] step 2\n", b"[rank1] step 2\n"], 0.1)
    # ranks 0 and 1 are past both; rank 2 past "loss 0.2", in "loss 0.3": both are final
    assert c.take(0.1) == b"[rank1] loss 0.2\n[rank2] loss 0.3\n"
    feed(c, [b"[rank2] step 2\n"], 0.2)
    assert c.take(0.2) == b"[rank0-2] step 2\n"


def test_a_ranks_order_holds_and_a_repeated_line_shows_twice():
    c = Collapser(window=1.0, expected=2)
    # rank 1 prints Y before A: its A cannot join rank 0's A, held before Y
    feed(c, [b"[rank0] A\n", b"[rank0] X\n", b"[rank1] Y\n", b"[rank1] A\n", b"[rank0] A\n"], 0.0)
    assert c.take(2.0, everything=False) == (b"[rank0] A\n[rank0] X\n[rank1] Y\n[rank0,1] A\n")
    c = Collapser(window=1.0, expected=2)
    feed(c, [b"[rank0] ---\n", b"[rank0] ---\n", b"[rank1] ---\n", b"[rank1] ---\n"], 0.0)
    assert c.take(0.0) == b"[rank0,1] ---\n[rank0,1] ---\n"


def test_memory_is_bounded_whatever_the_window(monkeypatch):
    monkeypatch.setattr(console, "HELD_BYTES", 100)
    c = Collapser(window=60.0, expected=2)
    feed(c, [b"[rank0] %03d %s\n" % (i, b"x" * 20) for i in range(10)], 0.0)
    out = c.take(0.0)
    assert out.count(b"\n") == 6 and c.held_bytes <= 100    # the oldest shown early


def test_the_budget_keeps_rank_0_lines_alike_and_a_failed_ranks_last_lines():
    b = Budget(100, "LOG_DIR/worker_<rank>.log (mpilaunch logs LOG_DIR)")
    c = Collapser(window=1.0, expected=3, budget=b)
    b.seen(50, 0.0)
    feed(c, [b"[rank1] under budget\n"], 0.0)
    assert c.take(1.0) == b"[rank1] under budget\n" and b.notice() == b""
    b.seen(200, 1.5)
    feed(c, [b"[rank1] dropped\n", b"[rank0] kept\n", b"[rank1] alike\n", b"[rank2] alike\n",
             b"[rank2] Traceback\n", b"[rank2] Error: boom\n"], 1.5)
    b.seen(10, 2.6)   # a new second: what came in the last one is still judged as it came
    assert c.take(3.0) == b"[rank0] kept\n[rank1,2] alike\n"
    assert b.notice().startswith(b"mpilaunch: console: the ranks' lines are over 100 bytes/s;")
    assert b.notice() == b""     # once
    assert b.fail(2) == (b"mpilaunch: console: rank 2 failed; its last 2 line(s), held back by the "
                         b"console's budget:\n[rank2] Traceback\n[rank2] Error: boom\n")
    b.seen(200, 3.0)
    feed(c, [b"[rank2] after\n", b"[rank1] not\n"], 3.0)
    assert c.take(4.0) == b"[rank2] after\n" and b.dropped == 4
    b.seen(10, 5.0)   # a quiet second: every rank's lines pass again, nothing said again
    feed(c, [b"[rank1] back\n"], 5.0)
    assert c.take(6.0) == b"[rank1] back\n" and b.notice() == b""


def test_the_relay_keeps_a_progress_bars_carriage_returns_and_shows_a_prompt():
    r, w = os.pipe()
    got = []
    done = threading.Event()
    relay = console.CollapseRelay(os.fdopen(r, "rb"), got.append, lambda s: None, window=0.2, expected=2)
    relay.start()
    os.write(w, b"[rank0] 10%\r20%\r30%\n[rank1] name? ")
    while b"".join(got) != b"[rank0] 10%\r20%\r30%\n[rank1] name? ":
        assert relay.is_alive()
        done.wait(0.02)
    os.write(w, b"bob\n")
    os.close(w)
    relay.join(10)
    assert b"".join(got) == b"[rank0] 10%\r20%\r30%\n[rank1] name? bob\n"


def test_the_relay_drains_the_stream_whatever_goes_wrong_in_the_collapsing(monkeypatch):
    def broken(self, line, now):
        raise ValueError("planted")
    monkeypatch.setattr(Collapser, "add", broken)
    r, w = os.pipe()
    got = []
    relay = console.CollapseRelay(os.fdopen(r, "rb"), got.append, lambda s: None, window=0.2, expected=2)
    relay.start()
    os.write(w, b"[rank0] a\n")
    while not got:
        assert relay.is_alive()
        threading.Event().wait(0.02)
    os.write(w, b"[rank1] b\n" * 1000)
    os.close(w)
    relay.join(10)
    out = b"".join(got)
    assert out.startswith(b"mpilaunch: console: collapsing stopped (a bug; please report it): Traceback")
    assert b"ValueError: planted" in out and out.endswith(b"[rank1] b\n" * 1000)


def _until(pred, relay, what):
    for _ in range(1000):
        if pred():
            return
        assert relay.is_alive(), what
        threading.Event().wait(0.01)
    raise AssertionError(what)


def test_a_flood_over_the_budget_is_held_back_a_run_at_a_time():
    r, w = os.pipe()
    got = []
    budget = Budget(1000, "LOGS")
    relay = console.CollapseRelay(os.fdopen(r, "rb"), got.append, lambda s: None, window=60.0, expected=3,
                                  budget=budget)
    relay.start()
    os.write(w, b"".join(b"[rank2] before %03d %s\n" % (i, b"x" * 40) for i in range(30)))   # > 1000 B
    _until(lambda: budget.over, relay, "the budget spent")
    flood = b"".join(b"[rank1] flood %05d\n" % i for i in range(2000))
    os.write(w, flood + b"[rank0] mine 1\nmpirun says\n[rank0] mine 2\n" + flood[:200])
    _until(lambda: budget.dropped >= 2010, relay, "rank 1's runs held back")
    relay.failed(1)
    os.close(w)
    relay.join(10)
    out = b"".join(got).decode()
    assert out.count("flood") == 50     # rank 1's last 50, shown at its failure
    assert "mpilaunch: console: rank 1 failed; its last 50 line(s), held back by the console's budget:" in out
    lines = [ln for ln in out.splitlines() if "flood" not in ln and "held back" not in ln and "before" not in ln]
    assert lines[0].startswith("mpilaunch: console: the ranks' lines are over 1000 bytes/s")
    assert lines[1:] == ["[rank0] mine 1", "mpirun says", "[rank0] mine 2"]
