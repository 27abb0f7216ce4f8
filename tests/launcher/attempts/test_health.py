"""The hosts' health across attempts (mpilaunch/attempts/health.py): one record of failures and
cool-downs for host discovery and for the check before a relaunch; what that check drops, or
how it ends the job."""
import collections

import pytest

from mpilaunch.config.hostfile import Host
from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import loop, health
from mpilaunch.attempts.nextattempt import Between
from mpilaunch.supervise.attempt import AttemptRecord

C = collections.namedtuple("C", "hosts np master_addr hosts_source resilience", defaults=(None,))
HOSTS = (Host("10.0.0.1", 1), Host("10.0.0.2", 1), Host("10.0.0.3", 1))


def Att(lost=(), signalled=()):
    return AttemptRecord(0, 1, lost=tuple(lost), signalled=tuple(signalled))


def lr(m=None, budget=3):
    return Resilience(budget, 0.0, None, None, True, "/logs", False, False, False, m)


class Checks:
    """The hosts' checks: those in ``bad`` fail (name -> why); records what was checked."""

    def __init__(self, bad=None):
        self.bad, self.asked = bad or {}, []

    def __call__(self, cfg, hosts):
        self.asked.append([h.name for h in hosts])
        return {h.name: self.bad[h.name] for h in hosts if h.name in self.bad}


def test_the_second_failure_cools_a_host_down_for_the_cool_down():
    now = [0.0]
    hh, said = health.HostHealth(lambda: now[0]), []
    assert hh.charge(["a"], said.append) == [] and hh.fails == {"a": 1}
    assert hh.charge(["a", "b"], said.append) == ["a"]
    assert said == ["host a failed 2 times: left out for 300 s"]
    assert hh.fails == {"a": 0, "b": 1} and hh.cooling() == {"a": 300.0}
    now[0] = 299.5
    assert hh.why_out("a") == "failed 2 times, cooling down (0 s left)"
    now[0] = 300.0
    assert hh.cooling() == {} and hh.why_out("a") is None


def test_discovery_keeps_its_record_in_the_same_health_record():
    from mpilaunch.attempts import discovery

    d = discovery.Discovery("/d.sh", None, clock=lambda: 0.0, runner=lambda: HOSTS,
                            preflight=lambda cfg, hosts: {})
    d.charge(["10.0.0.2", "10.0.0.2"], lambda text: None)
    assert isinstance(d.health, health.HostHealth) and d.cooled == {"10.0.0.2": 300.0}
    assert discovery.FAILS_TO_COOL == health.FAILS_TO_COOL == 2


def test_a_signalled_ranks_host_failing_its_check_is_dropped_with_min_hosts():
    cfg = C(HOSTS, 3, None, "hostfile")
    checks, said = Checks({"10.0.0.3": "ssh port: connection refused"}), []
    step = Between(cfg._replace(resilience=lr(2)), cfg.master_addr, Att(signalled=[2]), 1)
    new, dropped = health.before_relaunch(health.HostHealth(), step, said.append, checks)
    assert checks.asked == [["10.0.0.3"]]
    assert dropped == {"10.0.0.3": "ssh port: connection refused"}
    assert new.hosts == HOSTS[:2] and new.np == 2 and new.resilience.min_hosts == 2
    assert said == ["host 10.0.0.3 failed its check before attempt 1: ssh port: connection "
                    "refused"]


def test_without_min_hosts_the_job_ends_naming_the_host():
    cfg = C(HOSTS, 3, None, "hostfile")
    with pytest.raises(health.Ended) as end:
        health.before_relaunch(health.HostHealth(),
                               Between(cfg._replace(resilience=lr(None)), cfg.master_addr, Att(signalled=[1]), 1),
                lambda text: None, Checks({"10.0.0.2": "ssh port: refused"}))
    assert str(end.value) == ("host 10.0.0.2 failed its check before attempt 1: ssh port: "
                              "refused; not restarting onto it (give --min-hosts to go on "
                              "without it)")
    assert end.value.status == 255


def test_too_few_left_ends_the_job_too():
    cfg = C(HOSTS, 3, None, "hostfile")
    with pytest.raises(health.Ended) as end:
        health.before_relaunch(health.HostHealth(),
                               Between(cfg._replace(resilience=lr(3)), cfg.master_addr, Att(lost=["10.0.0.1"]), 2),
                lambda text: None, Checks({"10.0.0.1": "resolve: no address"}))
    # lost, then failing its check: two failures (as discovery counts them), it cools down
    assert str(end.value) == ("host 10.0.0.1 failed its check before attempt 2: resolve: no "
                              "address; failed 2 times: left out for 300 s; not restarting onto "
                              "it (2 host(s) would be left, fewer than --min-hosts 3)")


def test_a_lost_host_the_shrink_drops_anyway_is_not_checked():
    # --min-hosts 2 of 3: the lost host goes whatever its check would say; the check of a host
    # known gone would only wait out its ssh time-out. Its rank's signalled host still is.
    cfg = C(HOSTS, 3, None, "hostfile")
    checks = Checks({"10.0.0.3": "ssh port: timed out"})
    step = Between(cfg._replace(resilience=lr(2)), cfg.master_addr, Att(lost=["10.0.0.3"]), 1)
    assert health.before_relaunch(health.HostHealth(), step, lambda text: None, checks) is None
    assert checks.asked == []
    step = Between(cfg._replace(resilience=lr(1)), cfg.master_addr,
                   Att(lost=["10.0.0.3"], signalled=[0]), 1)
    checks = Checks({"10.0.0.1": "login: refused"})
    new, dropped = health.before_relaunch(health.HostHealth(), step, lambda text: None, checks)
    assert checks.asked == [["10.0.0.1"]] and new.hosts == HOSTS[1:2]
    assert dropped == {"10.0.0.1": "login: refused", "10.0.0.3": "lost"}


@pytest.mark.parametrize("att", [Att(), Att(signalled=[0])])
def test_a_host_that_passes_or_no_host_involved_changes_nothing(att):
    cfg = C(HOSTS, 3, None, "hostfile")
    checks = Checks()
    assert health.before_relaunch(health.HostHealth(), Between(cfg._replace(resilience=lr(None)), cfg.master_addr, att, 1),
            lambda text: None, checks) is None
    assert checks.asked == ([["10.0.0.1"]] if att.signalled else [])


def test_a_host_lost_twice_sits_out_even_when_it_passes_its_check():
    cfg = C(HOSTS, 3, None, "hostfile")
    hh, said = health.HostHealth(lambda: 0.0), []
    att = Att(lost=["10.0.0.2"])
    assert health.before_relaunch(hh, Between(cfg._replace(resilience=lr(None)), cfg.master_addr, att, 1),
            said.append, Checks()) is None
    with pytest.raises(health.Ended) as end:
        health.before_relaunch(hh, Between(cfg._replace(resilience=lr(None)), cfg.master_addr, att, 2), said.append, Checks())
    assert str(end.value) == ("host 10.0.0.2 failed its check before attempt 2: failed 2 times, "
                              "cooling down (300 s left); not restarting onto it (give "
                              "--min-hosts to go on without it)")
    assert said == ["host 10.0.0.2 failed 2 times: left out for 300 s"]


def test_a_local_job_is_never_checked():
    local = (Host("localhost", 2), Host("127.0.0.1", 1))
    cfg = C(local, 3, None, "-H")
    checks = Checks({"localhost": "x"})
    step = Between(cfg._replace(resilience=lr(None)), cfg.master_addr, Att(lost=["localhost"], signalled=[0]), 1)
    assert health.before_relaunch(health.HostHealth(), step, lambda t: None, checks) is None
    assert checks.asked == []


def test_the_summary_says_why_the_status_is_not_the_last_attempts():
    att = AttemptRecord(0, 137, "rank 2 (worker) on host c: killed by signal 9 (SIGKILL)",
                        end_note="host c failed its check before attempt 1: ssh port: refused; "
                                 "not restarting onto it (give --min-hosts to go on without "
                                 "it): exit status 255", end_status=255)
    assert loop.summary([att], lr(None), 255).splitlines()[:2] == [
        "mpilaunch: 1 attempt(s), restart budget 3; exit status 255 (a host failed its check "
        "before a restart)",
        "  host c failed its check before attempt 1: ssh port: refused; not restarting onto it "
        "(give --min-hosts to go on without it): exit status 255"]


def test_a_slurm_allocation_is_not_checked_over_ssh():
    S = collections.namedtuple("S", "hosts np master_addr hosts_source hosts_from resilience",
                               defaults=(None,))
    cfg = S(HOSTS, 3, None, "Slurm", "slurm")
    checks = Checks({"10.0.0.3": "x"})
    assert health.before_relaunch(health.HostHealth(),
                                  Between(cfg._replace(resilience=lr(None)), cfg.master_addr, Att(signalled=[2]), 1),
            lambda t: None, checks) is None
    assert checks.asked == []
