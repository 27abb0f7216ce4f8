"""The launcher's board (mpilaunch/monitor/board.py): rounds from samples, the straggler's
record and line, the job view top and /metrics read, the end-of-job lines."""
import json
import threading
from dataclasses import replace

from mpilaunch.attempts import monitoring
from mpilaunch.backends.openmpi import OpenMpi
from mpilaunch.config.mpi import OMPI5, MpiInfo
from mpilaunch.monitor import straggler
from mpilaunch.monitor.board import Board
from mpilaunch.monitor.model import JobView, Sample
from mpilaunch.output.summary import Collector, Event

OMPI = OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5))


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


class Channel:
    """The two questions the board asks the control channel."""
    def __init__(self, ranks, hosts):
        self._ranks, self._hosts = ranks, hosts

    def ranks(self):
        return list(self._ranks)

    def host_of(self, rank):
        return self._hosts.get(rank, "?")


def sample(rank, t, wait, cpu=0.0, host=None, hot="train.py:9 in step", pid=None, role="worker",
           sampler="py-spy", output_t=None):
    return Sample(rank, role, pid or 100 + rank, t, cpu, 1 << 20, output_t, wait, hot, 50, sampler,
                  host or f"h{rank}")


def board(np=4, interval=1.0, warm=True):
    """A board of an attempt of ``np`` ranks; ``warm``: after one round in which every rank
    waited (every rank has reached the job's collectives: the rule judges from the next)."""
    clock, changes, rounds = Clock(), [], []
    b = Board(interval, on_change=changes.append, on_round=rounds.append, clock=clock, wall=clock)
    b.attempt_started(0, np, Collector(OMPI), None)
    if warm:
        one_round(b, clock, [0.5] * np)
        rounds.clear()
    return b, clock, changes, rounds


def one_round(b, clock, waits, hot=None):
    clock.t += 1.0
    for r, w in enumerate(waits):
        b.feed(sample(r, clock.t, w, cpu=clock.t - 1000.0,
                      hot=(hot or {}).get(r, "train.py:9 in step")))


def test_a_round_closes_when_every_rank_has_sent_and_names_the_straggler_once():
    b, clock, changes, rounds = board()
    one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    rounds.clear()
    assert changes == []                         # two rounds: a pause, for all the rule knows
    clock.t += 1.0
    for r, w in enumerate([0.64, 0.60, 0.02]):
        b.feed(sample(r, clock.t, w, hot="train.py:41 in load_batch" if r == 2 else None))
    assert rounds == [] and changes == []        # rank 3 not in yet
    b.feed(sample(3, clock.t, 0.66))
    assert rounds == [[0.64, 0.60, 0.02, 0.66]]
    assert [c.fields() for c in changes] == [
        {"rank": 2, "host": "h2", "score": 0.62, "others_wait": 0.64, "wait_share": 0.02,
         "slowdown": 2.72, "hot_frame": "train.py:41 in load_batch",
         "recovered": False}]
    assert changes[0].line == ("rank 2 on host h2 is holding the job back: others wait 64% of "
                               "the time for it; its time goes to train.py:41 in load_batch")
    one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    assert len(changes) == 1 and len(rounds) == 2      # still one: no second event


def test_recovery_is_told_and_the_end_lines_list_the_straggler():
    b, clock, changes, _ = board()
    for _ in range(3):
        one_round(b, clock, [0.64, 0.60, 0.02, 0.66], hot={2: "train.py:41 in load_batch"})
    one_round(b, clock, [0.10, 0.12, 0.09, 0.11])      # mean gap 0.31: still one
    one_round(b, clock, [0.10, 0.12, 0.09, 0.11])      # 0.02: recovered
    assert [(c.rank, c.recovered) for c in changes] == [(2, False), (2, True)]
    assert changes[1].line == ("rank 2 on host h2 no longer holds the job back: others wait "
                               "11% of the time, it waits 9%")
    assert monitoring.end_lines(b) == (
        "mpilaunch: 1 straggler(s) seen\n"
        "  rank 2 on host h2: held the job back 2 s, others waited up to 64% of the time for it "
        "(the job 2.72x as long, the median of its rounds); its time went to train.py:41 in load_batch\n")


def test_the_start_up_is_not_judged_but_a_rank_that_never_waits_is_after_two_rounds():
    b, clock, changes, rounds = board(warm=False)
    one_round(b, clock, [0.0, 0.0, 0.0, 0.0])         # importing
    one_round(b, clock, [0.9, 0.0, 0.9, 0.9])         # rank 1 still imports: the others wait
    one_round(b, clock, [0.9, 0.0, 0.9, 0.9])
    assert changes == [] and len(rounds) == 3
    one_round(b, clock, [0.9, 0.0, 0.9, 0.9])         # two rounds the only one not seen waiting:
    assert changes == []                              # it arrives last: judged from here
    one_round(b, clock, [0.9, 0.0, 0.9, 0.9])
    one_round(b, clock, [0.9, 0.0, 0.9, 0.9])
    assert [(c.rank, c.score.score) for c in changes] == [(1, 0.9)]


def test_two_slow_ranks_of_eight_never_seen_waiting_are_judged_too():
    b, clock, changes, rounds = board(np=8, warm=False)
    slow = [0.0 if r in (2, 5) else 0.8 for r in range(8)]
    for _ in range(6):
        one_round(b, clock, slow)
    assert sorted(c.rank for c in changes) == [2, 5]


def test_the_slow_one_of_two_ranks_never_seen_waiting_is_judged():
    b, clock, changes, rounds = board(np=2, warm=False)
    for _ in range(6):
        one_round(b, clock, [0.75, 0.0])
    assert [c.rank for c in changes] == [1]


def test_a_share_from_too_few_stack_samples_is_not_judged():
    b, clock, changes, rounds = board()
    clock.t += 1.0
    for r, w in enumerate([0.64, 0.60, 0.02, 0.66]):
        b.feed(Sample(r, "worker", 100 + r, clock.t, 0.0, 1, None, w, None, 9, "py-spy", f"h{r}"))
    assert rounds == [] and changes == []              # no share to record, none judged


def test_a_late_rank_is_not_waited_for_past_one_and_a_half_intervals():
    b, clock, _, rounds = board()
    one_round(b, clock, [0.6, 0.6, 0.0, 0.6])
    clock.t += 1.0
    for r in (0, 1, 2):
        b.feed(sample(r, clock.t, 0.5))
    assert len(rounds) == 1
    clock.t += 1.0
    b.feed(sample(0, clock.t, 0.5))                  # 2 s since the last round: it closes
    assert rounds[-1] == [0.5, 0.5, 0.5, None]


def test_without_wait_shares_no_round_is_recorded_and_no_one_is_named():
    b, clock, changes, rounds = board(warm=False)
    one_round(b, clock, [None, None, None, None])
    one_round(b, clock, [None, None, None, None])
    assert rounds == [] and changes == [] and monitoring.end_lines(b) == ""
    assert b.view().sampler == "py-spy"
    b.feed(sample(0, clock.t, None, sampler="none: py-spy is not installed"))
    assert b.view().sampler == "none: py-spy is not installed"


def test_one_rank_is_never_a_straggler():
    b, clock, changes, rounds = board(np=1, warm=False)
    one_round(b, clock, [0.0])
    one_round(b, clock, [0.0])
    assert changes == [] and rounds == [[0.0], [0.0]]


def test_the_view_states_cpu_and_the_straggler_row():
    b, clock, _, _ = board(warm=False)
    col = Collector(OMPI)
    b.attempt_started(1, 4, col, Channel([0, 1, 2], {0: "h0", 1: "h1", 2: "h2", 3: "h3"}))
    one_round(b, clock, [0.5] * 4)
    for _ in range(3):
        one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    clock.t += 1.0
    b.feed(sample(0, clock.t, 0.6, cpu=4.5, output_t=clock.t - 2.0))   # 0.5 CPU s in 1 s
    col.feed_status(Event(1, "h1", "worker", "exit", 0, None, "self", None, [], clock.t, None))
    col.feed_status(Event(3, "h3", "worker", "exit", None, 9, "terminated", None, [], clock.t, None))
    v = b.view()
    assert (v.attempt, v.restarts, v.np, v.interval) == (1, 1, 4, 1.0)
    rows = {r.rank: r for r in v.ranks}
    assert [(r.rank, r.state, r.up, r.straggler, r.score) for r in v.ranks] == [
        (0, "running", True, False, -0.04), (1, "exited 0", False, False, 0.04),
        (2, "running", True, True, 0.62), (3, "signal 9", False, False, -0.06)]
    assert (rows[0].cpu_pct, rows[0].output_age, rows[0].cpu_s) == (50.0, 2.0, 4.5)
    assert rows[2].cpu_pct == 100.0           # its last two samples: 1 CPU s in 1 s
    assert JobView.from_json(v.to_json()) == v


def test_a_rank_not_sampled_yet_is_starting_with_its_host():
    b, _, _, _ = board(np=2)
    b.attempt_started(0, 2, Collector(OMPI), Channel([0], {0: "h0"}))
    assert [(r.rank, r.host, r.state, r.up) for r in b.view().ranks] == [
        (0, "h0", "starting", False), (1, "", "starting", False)]


def test_a_new_attempt_forgets_the_last_ones_samples_but_not_its_stragglers():
    b, clock, changes, _ = board()
    for _ in range(3):
        one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    clock.t += 5.0
    b.attempt_started(1, 4, Collector(OMPI), None)
    assert [r.state for r in b.view().ranks] == ["starting"] * 4
    clock.t += 10.0
    assert b.seen_lines() == [
        "rank 2 on host h2: held the job back 5 s, others waited up to 64% of the time for it "
        "(the job 2.72x as long, the median of its rounds); its time went to train.py:9 in step"]


def test_feeding_and_viewing_from_threads_at_once():
    b, clock, _, _ = board(np=8)
    stop = threading.Event()
    views = []

    def read():
        while not stop.is_set():
            views.append(json.loads(b.view().to_json())["np"])

    t = threading.Thread(target=read)
    t.start()
    for i in range(200):
        b.feed(sample(i % 8, 1000.0 + i, 0.5))
    stop.set()
    t.join()
    assert views and set(views) == {8}


def test_a_round_where_no_rank_waits_anywhere_reads_cannot_tell():
    # an asynchronous collective (NCCL, MindSpore's PyNative) is waited for at the next read of
    # a result, where no stack shows a wait: every share 0, and 0 % would be a claim
    b, clock, changes, _ = board()
    one_round(b, clock, [0.0, 0.0, 0.0, 0.0])
    rows = b.view().ranks
    assert [(r.wait_share, r.wait_note) for r in rows] == [(None, "cannot tell")] * 4
    one_round(b, clock, [0.6, 0.0, 0.6, 0.6])         # a wait seen: the shares are told again
    assert [(r.wait_share, r.wait_note) for r in b.view().ranks] == [
        (0.6, ""), (0.0, ""), (0.6, ""), (0.6, "")]
    # a rank whose wait under backward could not be split (no thread state): cannot tell
    b.feed(sample(1, clock.t + 0.5, None))
    assert (b.view().ranks[1].wait_share, b.view().ranks[1].wait_note) == (None, "cannot tell")
    assert changes == []


def test_a_ranks_cpu_counter_only_grows_across_restarts_and_attempts():
    b, clock, _, _ = board(np=1, warm=False)
    b.feed(sample(0, clock.t, None, cpu=5.0, pid=100))
    b.feed(sample(0, clock.t + 1, None, cpu=7.0, pid=100))
    assert b.view().ranks[0].cpu_s == 7.0
    b.feed(sample(0, clock.t + 2, None, cpu=0.5, pid=200))    # restarted in place: a new process
    assert b.view().ranks[0].cpu_s == 7.5
    b.attempt_started(1, 1, Collector(OMPI), None)
    b.feed(sample(0, clock.t + 3, None, cpu=1.0, pid=300))    # the next attempt's
    assert b.view().ranks[0].cpu_s == 8.5


def test_a_stragglers_frame_is_where_its_time_goes_that_the_others_does_not():
    """A Trainer's job: every rank runs the library's forward and backward under the script's
    ``trainer.train()`` line; the slow rank's hottest place is that line, but its own time is
    its reader's (the others spend as long at the line and none in the reader)."""
    b, clock, changes, _ = board()
    line, reader = "train.py:50 in <module>", "train.py:28 in Sequences.__getitem__"
    for _ in range(3):
        clock.t += 1.0
        for r, w in enumerate([0.64, 0.60, 0.02, 0.66]):
            places = [[line, 0.52], [reader, 0.46]] if r == 2 else [[line, round(0.98 - w, 2)]]
            b.feed(replace(sample(r, clock.t, w, hot=line), places=places))
    assert [(c.rank, c.hot_frame) for c in changes] == [(2, reader)]
    assert changes[0].line.endswith("; its time goes to " + reader)
    rows = {r.rank: r for r in b.view().ranks}
    assert (rows[2].straggler, rows[2].hot_frame, rows[0].hot_frame) == (True, reader, line)
    assert monitoring.end_lines(b).endswith("; its time went to " + reader + "\n")


def test_the_own_place_is_the_one_furthest_above_the_others_median():
    own = [["a.py:1 in train", 0.5], ["a.py:9 in read", 0.3], ["a.py:5 in log", 0.1]]
    others = [[["a.py:1 in train", 0.5], ["a.py:5 in log", 0.2]], [["a.py:1 in train", 0.45]],
              [["a.py:9 in read", 0.35]]]
    # train: 0.5 - 0.5; read: 0.3 - 0 (the median of 0, 0, 0.35); log: 0.1 - 0
    assert straggler.own_place(own, others) == "a.py:9 in read"
    assert straggler.own_place(own, [own]) is None       # the same as the others': nothing own
    assert straggler.own_place([], others) is None and straggler.own_place(own, []) is None


def test_rank_0s_checkpoints_are_pauses_not_a_straggler():
    """Balanced rounds (every rank 20 %) and rank 0 saving a checkpoint now and then: the rounds
    that hold a save read it at 0 % and the others at 60-70 %, one round, then two in a row,
    never three: no straggler, and the end lines say what it was (docs/MONITOR.md)."""
    b, clock, changes, _ = board(interval=5.0)
    calm, save = [0.2, 0.22, 0.18, 0.2], [0.0, 0.6, 0.7, 0.65]
    hot = {0: "train.py:30 in save_checkpoint"}
    for waits in (calm, save, calm, calm, save, save, calm, calm):
        one_round(b, clock, waits, hot=hot)
    assert changes == [] and b.seen_lines() == []
    # the others' median 0.65 (rounds with a save): three rounds x 0.65 x 5 s = 9.75 s
    assert b.pause_lines() == [
        "rank 0 on host h0: paused the job 2 times, about 10 s in all (others waited up to 65% "
        "of a round for it), never for 3 rounds in a row: not a straggler; its time went to "
        "train.py:30 in save_checkpoint"]


def test_a_drags_first_rounds_are_no_pause():
    b, clock, changes, _ = board()
    for _ in range(4):
        one_round(b, clock, [0.64, 0.60, 0.02, 0.66])
    assert [c.rank for c in changes] == [2]
    assert b.pause_lines() == []
