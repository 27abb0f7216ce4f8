"""--min-hosts (mpilaunch/attempts/shrink.py): which hosts the next attempt gets after a host
was lost, and its world size; the option's refusals."""
import collections
import types

import pytest

from mpilaunch.config.resilience import Resilience
from mpilaunch.attempts import shrink
from mpilaunch.attempts.nextattempt import Between
from mpilaunch.supervise.attempt import AttemptRecord
from mpilaunch.errors import UsageError
from mpilaunch.config.hostfile import Host

C = collections.namedtuple("C", "hosts np master_addr hosts_source resilience", defaults=(None,))
HOSTS = (Host("10.0.0.1", 2), Host("10.0.0.2", 2), Host("10.0.0.3", 2))


def Att(lost, rank_hosts=None):
    return AttemptRecord(0, 1, lost=tuple(lost), rank_hosts=rank_hosts or {})


def lr(m):
    return Resilience(2, 0.0, None, None, True, "/logs", False, False, False, m)


def test_the_lost_host_is_dropped_and_the_world_is_the_slots_left():
    cfg = C(HOSTS, 6, "10.0.0.1", "hostfile")
    step = Between(cfg._replace(resilience=lr(2)), None, Att(["10.0.0.3"]), 1)
    new, dropped = shrink.shrink(step)
    assert dropped == ["10.0.0.3"]
    assert new.hosts == HOSTS[:2] and new.np == 4
    assert new.master_addr is None          # the user's (none): decided again for the hosts left
    assert new.resilience.min_hosts == 2


def test_a_host_named_by_its_daemon_is_found_through_its_ranks():
    cfg = C(HOSTS, 6, None, "hostfile")
    att = Att(["node1"], {0: "node0", 1: "node0", 2: "node1", 3: "node1", 4: "node2"})
    new, dropped = shrink.shrink(Between(cfg._replace(resilience=lr(2)), cfg.master_addr, att, 1))
    assert dropped == ["10.0.0.2"] and new.hosts == (HOSTS[0], HOSTS[2]) and new.np == 4


def test_a_smaller_np_of_the_users_is_kept_when_the_hosts_left_hold_it():
    cfg = C(HOSTS, 3, None, "hostfile")
    new, _ = shrink.shrink(Between(cfg._replace(resilience=lr(1)), cfg.master_addr, Att(["10.0.0.1"]), 1))
    assert new.hosts == HOSTS[1:] and new.np == 3


@pytest.mark.parametrize("m, lost", [
    (3, ["10.0.0.3"]),          # fewer than M left: every host again, as without the option
    (None, ["10.0.0.3"]),       # off
    (2, []),                    # no host lost
    (2, ["elsewhere"]),         # a name that matches no host and no rank
])
def test_no_shrink(m, lost):
    cfg = C(HOSTS, 6, None, "hostfile")
    assert shrink.shrink(Between(cfg._replace(resilience=lr(m)), cfg.master_addr, Att(lost), 1)) is None


def test_refusals():
    class Opts:
        pass
    cfg = C(HOSTS, 6, None, "hostfile")

    def check(min_hosts, n):
        from mpilaunch.config import resilience
        args = Opts()
        args.min_hosts, args.max_restarts = min_hosts, n
        launch = types.SimpleNamespace(hosts=cfg.hosts, hosts_source=cfg.hosts_source, log_dir="/logs",
                                       exec_mode=False, script=None, module=None, script_args=(),
                                       no_python=False)
        settings = resilience.settings(args, {}, launch)
        return settings.min_hosts
    assert check(None, 0) is None and check("2", 1) == 2
    with pytest.raises(UsageError, match="needs --max_restarts"):
        check("2", 0)
    with pytest.raises(UsageError, match="more than the 3 host"):
        check("4", 1)
    with pytest.raises(UsageError, match="--min-hosts"):
        check("0", 1)
