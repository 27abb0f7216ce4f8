"""The loop of attempts (mpilaunch/attempts/loop.py: run_job) with the Toy backend of
tests/helpers/toy.py, whose starter is a real process: every way out of the loop, what the job
exits with, how many attempts ran, and what the attempts' summary says."""
import collections
import os
import signal

from mpilaunch.config.hostfile import Host
from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import loop
from mpilaunch.attempts.loop import JobContext, State
from mpilaunch.attempts.hostsource import FixedHosts
from mpilaunch.supervise.attempt import AttemptRecord
from mpilaunch.supervise.stopping import BetweenAttempts
from helpers.toy import Toy, report, wait_then

C = collections.namedtuple("C", "hosts np master_addr master_port hosts_source hosts_from "
                                "exec_mode log_dir rank_extra keep_tune_file preflight resilience console",
                            defaults=(None, (0.0, 0)))
HERE = (Host("localhost", 2),)
FAILS = [[1, 3, "self"], [0, 143, "terminated"]]    # rank 1 exits 3, rank 0 is torn down
ENDS = [[0, 0, "self"], [1, 0, "self"]]              # both workers exit 0 (progress)


def cfg(tmp_path, hosts):
    return C(hosts, 2, None, 29500, "hostfile", "", False, str(tmp_path / "logs"), (), False, None)


def lr(tmp_path, budget, no_progress=0, delay=0.0):
    return Resilience(budget, delay, None, None, False, str(tmp_path / "logs"), True, False,
                   max_no_progress=no_progress)


def run(tmp_path, toy, budget, hosts=HERE, check=None, **more):
    c = cfg(tmp_path, hosts)._replace(resilience=lr(tmp_path, budget, **more))
    source = FixedHosts(check=check) if check else FixedHosts()
    return loop.run_job(JobContext(toy, dict(os.environ), c, source))


def summary(err):
    """The attempts' summary: the end of stderr, from its first line."""
    return err[err.rindex("mpilaunch: ", 0, err.rindex(" attempt(s), restart budget")):]


def test_success_at_once(tmp_path, capfd):
    toy = Toy([(ENDS, 0)])
    assert run(tmp_path, toy, 2) == 0
    assert len(toy.configs) == 1 and toy.attempts == []
    assert summary(capfd.readouterr().err).startswith(
        "mpilaunch: 1 attempt(s), restart budget 2; exit status 0 (the last attempt's)\n"
        f"  attempt 0: succeeded; logs: {tmp_path}/logs/attempt0\n")


def test_a_failure_is_relaunched_and_the_next_attempt_succeeds(tmp_path, capfd):
    toy = Toy([(FAILS, 143), (ENDS, 0)])
    assert run(tmp_path, toy, 2) == 0
    assert [c.log_dir for c in toy.configs] == [f"{tmp_path}/logs/attempt0",
                                                 f"{tmp_path}/logs/attempt1"]
    err = capfd.readouterr().err
    assert ("mpilaunch: attempt 0 failed (rank 1 (worker) on host h: exit code 3); restarting "
            "the job: attempt 1 of at most 3\n") in err
    assert summary(err).startswith(
        "mpilaunch: 2 attempt(s), restart budget 2; exit status 0 (the last attempt's)\n"
        f"  attempt 0: exit status 3: rank 1 (worker) on host h: exit code 3; no worker made "
        f"progress; logs: {tmp_path}/logs/attempt0\n"
        f"  attempt 1: succeeded; logs: {tmp_path}/logs/attempt1\n")


def test_the_budget_spent_ends_with_the_last_attempts_status(tmp_path, capfd):
    toy = Toy([(FAILS, 143), ([[0, 5, "self"]], 5)])
    assert run(tmp_path, toy, 1) == 5
    assert len(toy.configs) == 2
    assert summary(capfd.readouterr().err).startswith(
        "mpilaunch: 2 attempt(s), restart budget 1; exit status 5 (the last attempt's)\n")


def test_no_progress_stops_before_the_budget_is_spent(tmp_path, capfd):
    toy = Toy([(FAILS, 143)] * 5)
    assert run(tmp_path, toy, 4, no_progress=2) == 3
    assert len(toy.configs) == 2                  # not the five the budget allows
    err = capfd.readouterr().err
    assert ("mpilaunch: 2 attempts in a row failed before any worker made progress (last: rank 1 "
            "(worker) on host h: exit code 3): not restarting; restart budget 3 left unused\n"
            in err)
    assert summary(err).splitlines()[1] == (
        "  2 attempts in a row failed before any worker made progress "
        "(--max_no_progress_restarts 2): not restarted; restart budget 3 left unused")


def test_a_host_failing_its_check_ends_the_job_with_255(tmp_path, capfd):
    """Rank 0 killed by a signal: its host is checked before the relaunch, and fails."""
    asked = []

    def check(cfg, hosts):
        asked.append([h.name for h in hosts])
        return {"192.0.2.1": "ssh port: refused"}

    toy = Toy([([report(0, 137, signal=9), report(1, 143, "terminated")], 137), (ENDS, 0)])
    hosts = (Host("192.0.2.1", 1), Host("192.0.2.2", 1))
    assert run(tmp_path, toy, 2, hosts=hosts, check=check) == 255
    assert asked == [["192.0.2.1"]] and len(toy.configs) == 1
    err = capfd.readouterr().err
    said = ("host 192.0.2.1 failed its check before attempt 1: ssh port: refused; not restarting "
            "onto it (give --min-hosts to go on without it)")
    assert f"mpilaunch: {said}\n" in err
    assert summary(err).splitlines()[:2] == [
        "mpilaunch: 1 attempt(s), restart budget 2; exit status 255 (a host failed its check "
        "before a restart)", f"  {said}: exit status 255"]


def test_a_stop_signal_between_attempts_ends_the_job(tmp_path, capfd):
    toy = Toy([(FAILS, 143), (ENDS, 0)])

    def waiting():          # the restart delay runs: BetweenAttempts holds the stop signals
        handler = signal.getsignal(signal.SIGTERM)
        return isinstance(getattr(handler, "__self__", None), BetweenAttempts)

    sender = wait_then(waiting, lambda: os.kill(os.getpid(), signal.SIGTERM))
    assert run(tmp_path, toy, 2, delay=60.0) == 128 + signal.SIGTERM
    sender.join(5)
    assert len(toy.configs) == 1                  # no second attempt
    err = capfd.readouterr().err
    assert "mpilaunch: SIGTERM received between attempts: not restarting\n" in err
    assert signal.getsignal(signal.SIGTERM) is not None and not waiting()   # handlers restored


def test_a_usage_error_of_the_adapter_is_not_relaunched(tmp_path, capfd):
    refused = report(0, 2, role="adapter", event="error", message="--expect-ranks: wrong host")
    toy = Toy([([refused], 2), (ENDS, 0)])
    assert run(tmp_path, toy, 3) == 2
    assert len(toy.configs) == 1
    assert "restarting the job" not in capfd.readouterr().err


def test_the_judge_switches_on_the_records_alone(tmp_path):
    budget = lr(tmp_path, 2, no_progress=2)
    ok, failed = AttemptRecord(0, 0), AttemptRecord(0, 1, progress=False)
    assert loop.judge([ok], budget) is State.SUCCEEDED
    assert loop.judge([AttemptRecord(0, 143, stopped_by=15)], budget) is State.STOPPED
    assert loop.judge([AttemptRecord(0, 2, usage_error=True)], budget) is State.USAGE_ERROR
    assert loop.judge([failed], budget) is State.RELAUNCH
    assert loop.judge([failed, AttemptRecord(1, 1, progress=False)], budget) is State.NO_PROGRESS
    assert loop.judge([failed, AttemptRecord(2, 1)], budget) is State.BUDGET_SPENT
