"""The progress rule of --max_no_progress_restarts (mpilaunch/attempts/progress.py) and the
end it makes in the attempts' loop (mpilaunch/attempts/loop.py)."""
import pytest

from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import loop, progress
from mpilaunch.supervise.attempt import AttemptRecord
from mpilaunch.output.summary import Event


def _ev(rank, event, cause, t, code=None, sig=None, role="worker"):
    """A status line arriving at the launcher at ``t`` (its own clock, RankFacts' clock)."""
    return t, Event(rank, "a", role, event, code, sig, cause, None, [], 0.0)


@pytest.mark.parametrize("feed, expected", [
    # a script failing at import: its traceback is its first output, at its exit
    ([_ev(0, "output", "life", 1.0), _ev(0, "exit", "self", 1.02, code=1),
      _ev(1, "output", "life", 1.1), _ev(1, "exit", "self", 1.1, code=1)], False),
    # the same, rank 1 killed by the teardown after its traceback: its exit never reported
    ([_ev(0, "output", "life", 1.0), _ev(0, "exit", "self", 1.01, code=1),
      _ev(1, "output", "life", 1.02)], False),
    # nothing printed, one rank failed, the other torn down: no progress
    ([_ev(1, "exit", "self", 1.0, code=1), _ev(0, "exit", "terminated", 1.5, sig=15)], False),
    # rank 0 printed 5 s before rank 1 failed (and was torn down): rank 0 was working
    ([_ev(0, "output", "life", 1.0), _ev(1, "output", "life", 5.9),
      _ev(1, "exit", "self", 6.0, code=1), _ev(0, "exit", "terminated", 6.5, sig=15)], True),
    # one rank, first output 5 s before its failure: it went on after writing
    ([_ev(0, "output", "life", 1.0), _ev(0, "exit", "self", 6.0, code=1)], True),
    ([_ev(0, "output", "life", 1.0), _ev(0, "exit", "self", 5.9, code=1)], False),
    # the first failure counts, whoever's: rank 1's output came after it
    ([_ev(0, "exit", "self", 1.0, sig=9), _ev(1, "output", "life", 1.1),
      _ev(1, "exit", "self", 9.0, code=1)], False),
    # a worker that finished (exit 0) while another failed
    ([_ev(0, "exit", "life", 2.0, code=0), _ev(1, "exit", "self", 3.0, code=1)], True),
    # a watchdog progress event (output or heartbeat after a silence)
    ([_ev(0, "progress", "stall", 9.0), _ev(0, "exit", "self", 9.5, sig=9)], True),
    # the scheduler's output is not a worker's progress
    ([_ev(0, "output", "life", 1.0, role="scheduler"), _ev(1, "exit", "self", 9.0, code=1)],
     False),
])
def test_the_rule(feed, expected):
    now = [0.0]
    facts = progress.RankFacts(clock=lambda: now[0])
    for t, e in feed:
        now[0] = t
        facts.feed(e)
    now[0] = 100.0     # the attempt's end: the first failure decides, not the end
    assert facts.made_progress() is expected


def test_without_a_failure_the_attempts_end_decides():
    now = [1.0]
    facts = progress.RankFacts(clock=lambda: now[0])
    facts.feed(_ev(0, "output", "life", 1.0)[1])
    now[0] = 3.0
    assert facts.made_progress() is False      # a lost host 2 s after the first output
    facts = progress.RankFacts(clock=lambda: now[0])
    facts.feed(_ev(0, "output", "life", 1.0)[1])
    now[0] = 9.0
    facts.failure()                            # an in-place restart's failure at 9 s
    now[0] = 50.0
    assert facts.made_progress() is True


def _failed(index, progressed, cause="rank 1 (worker) on host a: exit code 1"):
    return AttemptRecord(index, 1, cause, progress=progressed)


def test_streak_counts_from_the_last_attempt():
    assert progress.streak([]) == 0
    assert progress.streak([_failed(0, False), _failed(1, True), _failed(2, False),
                            _failed(3, False)]) == 2
    assert progress.streak([_failed(0, False), _failed(1, False)]) == 2


def _lr(limit, budget=10):
    return Resilience(budget, 0.0, None, None, False, "/logs", False, True, max_no_progress=limit)


def test_the_limit_ends_the_job_with_one_line_and_the_summary_says_it(capsys):
    done = [_failed(0, False), _failed(1, False)]
    assert loop.judge(done, _lr(3)) is loop.State.RELAUNCH
    done.append(_failed(2, False))
    assert loop.judge(done, _lr(0)) is loop.State.RELAUNCH    # 0: no limit
    assert loop.judge(done, _lr(3)) is loop.State.NO_PROGRESS
    done[-1] = loop.no_progress_stop(done, _lr(3))
    assert capsys.readouterr().err == (
        "mpilaunch: 3 attempts in a row failed before any worker made progress (last: rank 1 "
        "(worker) on host a: exit code 1): not restarting; restart budget 8 left unused\n")
    assert loop.summary(done, _lr(3), 1) == (
        "mpilaunch: 3 attempt(s), restart budget 10; exit status 1 (the last attempt's)\n"
        "  3 attempts in a row failed before any worker made progress "
        "(--max_no_progress_restarts 3): not restarted; restart budget 8 left unused\n"
        "  attempt 0: exit status 1: rank 1 (worker) on host a: exit code 1; no worker made "
        "progress; logs: /logs/attempt0\n"
        "  attempt 1: exit status 1: rank 1 (worker) on host a: exit code 1; no worker made "
        "progress; logs: /logs/attempt1\n"
        "  attempt 2: exit status 1: rank 1 (worker) on host a: exit code 1; no worker made "
        "progress; logs: /logs/attempt2\n")


def test_an_attempt_with_progress_breaks_the_streak():
    done = [_failed(0, False), _failed(1, False), _failed(2, True), _failed(3, False)]
    assert loop.judge(done, _lr(2)) is loop.State.RELAUNCH


def test_the_no_progress_rule_is_one_check_for_relaunches_and_restarts_in_place():
    done = [_failed(0, True), _failed(1, False), _failed(2, False)]
    assert [progress.spent(done, n) for n in (0, 1, 2, 3)] == [False, True, True, False]
    assert not progress.spent([], 1)


def test_a_restart_in_place_is_judged_by_the_relaunchs_judge(monkeypatch):
    """One owner of the restart decision (nextattempt.judge): an attempt the adapters restarted
    in place asks it with the attempts restarted in place so far, and ends the job when it
    says NO_PROGRESS, as the loop of attempts does before a relaunch."""
    from mpilaunch.attempts import nextattempt, restart
    from mpilaunch.backends.openmpi import OpenMpi
    from mpilaunch.config.mpi import OMPI5, MpiInfo
    from mpilaunch.contract import RESTART_EVENT

    asked, real = [], nextattempt.judge
    monkeypatch.setattr(nextattempt, "judge",
                        lambda recs, lr: asked.append([r.index for r in recs]) or real(recs, lr))

    class Job:
        control, ended, ends = None, False, 0

        def end(self):
            self.ends += 1

    lr = Resilience(5, 0.0, None, None, False, "/l", False, True, in_place=True, max_no_progress=2)
    att = restart.ResilientAttempt(0, lr, 2)
    collector = att.collector(OpenMpi(MpiInfo("/x/mpirun", (5, 0, 11), OMPI5)))
    job = Job()
    att.started(job)
    for t in (1.0, 2.0):
        collector.feed_status(Event(1, "h1", "worker", RESTART_EVENT, 3, None, "self", None, [], t))
    assert asked == [[0], [0, 1]]
    assert loop.judge([*att.in_place, att.no_progress], lr) is loop.State.NO_PROGRESS
    assert [r.index for r in att.in_place] == [0] and att.no_progress.index == 1 and job.ends == 1
