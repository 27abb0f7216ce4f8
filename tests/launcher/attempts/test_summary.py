"""The attempts' list printed after a job with --max_restarts (mpilaunch/attempts/loop.py)."""
from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import loop
from mpilaunch.supervise.attempt import Attempt, AttemptRecord


def test_summary_lists_every_attempt_with_its_cause_and_logs():
    lr = Resilience(2, 0.0, None, None, False, "/logs", False, True)
    first = AttemptRecord(0, 137, "rank 1 (worker) on host a: killed by signal 9 (SIGKILL)")
    second = AttemptRecord(1, 0)
    assert loop.summary([first, second], lr, 0) == (
        "mpilaunch: 2 attempt(s), restart budget 2; exit status 0 (the last attempt's)\n"
        "  attempt 0: exit status 137: rank 1 (worker) on host a: killed by signal 9 (SIGKILL); "
        "logs: /logs/attempt0\n"
        "  attempt 1: succeeded; logs: /logs/attempt1\n")


def test_a_plain_attempt_has_no_say_in_the_status():
    att = Attempt()
    assert att.verdict() == {} and att.on_stop(None, 15, None) is False
    assert att.summary("text", None) == "text"
