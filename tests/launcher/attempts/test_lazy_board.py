"""The monitor's board as the launcher holds it (mpilaunch/attempts/monitoring.py, LazyBoard):
made by its first sample or view, not at the job's start, and then exactly the board a job's
start would have made: its first round waits from the attempt's start (not from the sample that
made it), and the end of a job that had no sample says no straggler."""
import subprocess
import sys

from helpers import REPO
from mpilaunch.attempts import monitoring
from mpilaunch.monitor.board import ROUND_WAIT, Board
from mpilaunch.monitor.model import Sample


class Clock:
    """Stands for the time module in monitoring.py: the monotonic clock the board reads."""

    def __init__(self):
        self.t = 1000.0

    def monotonic(self):
        return self.t


def sample(rank, t):
    return Sample(rank, "worker", 100 + rank, t, 0.0, 1 << 20, None, 0.5, "train.py:9 in step",
                  50, "py-spy", f"h{rank}")


def test_the_first_round_waits_from_the_attempts_start_as_a_board_made_then(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    lazy = monitoring.LazyBoard(1.0)
    eager = Board(1.0, clock=clock.monotonic)
    for b in (lazy, eager):
        b.attempt_started(0, 2, None, None)
    assert lazy.made is None and lazy.seen_lines() == []
    # rank 0's first sample, later than ROUND_WAIT intervals after the start: the round closes
    # with it alone, rank 1's not waited for
    clock.t += ROUND_WAIT * 1.0 + 0.5
    for b in (lazy, eager):
        b.feed(sample(0, clock.t))
    assert lazy.made is not None
    assert (lazy.made.pending, lazy.made.last_round) == (eager.pending, eager.last_round) == ({}, clock.t)
    mine, theirs = lazy.view(), eager.view()
    assert (mine.attempt, mine.np, mine.ranks) == (theirs.attempt, theirs.np, theirs.ranks)


def test_a_sample_sooner_waits_for_the_others(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(monitoring, "time", clock)
    lazy = monitoring.LazyBoard(1.0)
    lazy.attempt_started(0, 2, None, None)
    clock.t += 1.0
    lazy.feed(sample(0, clock.t))
    assert set(lazy.made.pending) == {0} and lazy.made.last_round == 1000.0


def test_the_monitor_is_not_imported_until_a_sample_or_a_view():
    code = ("import sys\n"
            "from mpilaunch.attempts import monitoring\n"
            "lazy = monitoring.LazyBoard(1.0)\n"
            "lazy.attempt_started(0, 4, None, None)\n"
            "feed = lazy.feed\n"
            "print(sorted(m for m in sys.modules if m.startswith('mpilaunch.monitor')), lazy.seen_lines())\n"
            "lazy.view()\n"
            "print(sorted(m for m in sys.modules if m.startswith('mpilaunch.monitor')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         timeout=60)
    assert out.stdout.splitlines() == [
        "[] []", "['mpilaunch.monitor', 'mpilaunch.monitor.board', 'mpilaunch.monitor.model', "
        "'mpilaunch.monitor.straggler']"], out.stderr
